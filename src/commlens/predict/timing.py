"""Time of a step on a fabric: communication from the cost models, plus compute.

- Communication of a rank: the sum over its calls of count × the call's
  cost on the :class:`~commlens.predict.topology.Fabric` (flat or
  hierarchical, with the node link shared by the role's concurrent flows).
  The step's communication time is that of the slowest rank.
- Compute of a rank: the model FLOPs of one replica-step
  (conventions §2) split over its tp × pp ranks, ÷ the given TFLOP/s, times
  the pipeline bubble (k + p − 1)/k for p stages and k micro-batches.
- Without overlap the step is compute + communication. With overlap the
  calls marked ``overlap`` hide behind the compute of their own phase:
  forward ones (FSDP's prefetched gathers) behind the forward pass, 1/c of
  compute, backward ones (DDP's buckets but the last, FSDP's gathers and
  reduce-scatters) behind the backward pass, (c−1)/c of compute (c = 3, or
  4 with recomputation); only their excess is exposed. Everything else
  (tensor-parallel collectives, pipeline transfers, the optimizer's
  broadcasts) is on the critical path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from commlens.job.models import flops_per_step
from commlens.job.spec import Job
from commlens.optable import P2P_OPS
from commlens.predict.calls import PredictedCall
from commlens.predict.layout import boundary_pairs, embedding_groups, role_groups
from commlens.predict.topology import Fabric, link_flows


@dataclass(frozen=True)
class NetworkEstimate:
    """The predicted step on one network profile."""

    name: str
    """Inter-node profile name."""
    comm_time_s: float
    """Communication per step of the slowest rank."""
    compute_time_s: float
    """Compute per step of a rank, pipeline bubble included."""
    step_time_s: float
    """compute + communication (no overlap)."""
    step_time_overlap_s: float
    """compute + the communication that cannot hide behind backward."""
    op_times_s: dict[tuple[str, str], float] = field(default_factory=dict)
    """Per (op, role) time of the rank shown."""

    @property
    def comm_share(self) -> float:
        return self.comm_time_s / self.step_time_s if self.step_time_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "comm_time_s": self.comm_time_s,
            "compute_time_s": self.compute_time_s,
            "step_time_s": self.step_time_s,
            "step_time_overlap_s": self.step_time_overlap_s,
            "comm_share": self.comm_share,
        }


def compute_time(job: Job, tflops: float) -> float:
    """Seconds of compute per step on one rank (bubble included)."""
    flops = flops_per_step(job.model, job.seq_len, job.micro_batch, job.microbatches, job.recompute)
    per_rank = flops / (job.dims.tp * job.dims.pp)
    k, p = job.microbatches, job.dims.pp
    bubble = (k + p - 1) / k
    return per_rank / (tflops * 1e12) * bubble


class FlowTable:
    """How many flows share a node link, per traffic family, computed once per fabric."""

    def __init__(self, job: Job, fabric: Fabric) -> None:
        self.job, self.fabric = job, fabric
        self._cache: dict[str, int] = {}

    def _groups(self, family: str) -> Sequence[Sequence[int]]:
        dims = self.job.dims
        if family == "p2p":
            return boundary_pairs(dims)
        if family == "embedding":
            return embedding_groups(dims)
        if family in ("dp", "tp", "pp"):
            return role_groups(dims, family)
        return [range(dims.world_size)]

    def flows(self, call: PredictedCall) -> int:
        if call.family:
            family = call.family
        elif call.op in P2P_OPS:
            family = "p2p"
        else:
            family = call.role
        if family not in self._cache:
            self._cache[family] = link_flows(self.fabric, self._groups(family))
        return self._cache[family]


def rank_comm_time(
    calls: Sequence[PredictedCall], fabric: Fabric, flows: FlowTable
) -> tuple[float, float, float]:
    """(all, hideable in forward, hideable in backward) seconds of one rank's calls."""
    total = fwd = bwd = 0.0
    for c in calls:
        t = c.count * fabric.time(c.op, c.size_bytes, c.group, flows.flows(c))
        total += t
        if c.overlap and c.phase == "forward":
            fwd += t
        elif c.overlap:
            bwd += t
    return total, fwd, bwd


def estimate(
    job: Job,
    per_rank: dict[int, list[PredictedCall]],
    shown_rank: int,
    fabric: Fabric,
    tflops: float,
) -> NetworkEstimate:
    """The step on ``fabric`` for ranks whose calls are ``per_rank``."""
    flows = FlowTable(job, fabric)
    compute = compute_time(job, tflops)
    backward = compute * (3 / 4 if job.recompute else 2 / 3)
    forward = compute - backward
    worst = worst_overlap = 0.0
    for calls in per_rank.values():
        total, fwd, bwd = rank_comm_time(calls, fabric, flows)
        worst = max(worst, total)
        exposed = total - fwd - bwd + max(0.0, fwd - forward) + max(0.0, bwd - backward)
        worst_overlap = max(worst_overlap, exposed)
    op_times: dict[tuple[str, str], float] = {}
    for c in per_rank[shown_rank]:
        key = (c.op, c.role)
        t = c.count * fabric.time(c.op, c.size_bytes, c.group, flows.flows(c))
        op_times[key] = op_times.get(key, 0.0) + t
    return NetworkEstimate(
        name=fabric.inter.name,
        comm_time_s=worst,
        compute_time_s=compute,
        step_time_s=compute + worst,
        step_time_overlap_s=compute + worst_overlap,
        op_times_s=op_times,
    )
