"""Predict a job: per-rank calls (exact and textbook), volumes, times per network.

:func:`predict` is the library entry point behind ``commlens predict``. Ranks
that differ only in their data- or tensor-parallel index issue the same calls
(shards are even) on groups of the same shape, so it models one rank per
pipeline stage — which keeps 4096-GPU layouts instant — and shows the one
with the most wire bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from commlens.job.spec import Job
from commlens.predict.calls import OpVolume, PredictedCall, aggregate, by_role
from commlens.predict.exact import rank_calls
from commlens.predict.limits import check_job
from commlens.predict.profiles import NetworkProfile, get_profile
from commlens.predict.textbook import textbook_calls
from commlens.predict.timing import NetworkEstimate, estimate
from commlens.predict.topology import Fabric

DEFAULT_TFLOPS = 100.0
"""Achieved model TFLOP/s per rank when none is given (an A100-class GPU at ~30% MFU)."""


@dataclass
class Prediction:
    """What one job is predicted to communicate and cost per step."""

    job: Job
    shown_rank: int
    """The rank whose calls the tables show (the most wire bytes)."""
    per_rank: dict[int, list[PredictedCall]]
    """Steady-state calls of each modelled rank (one per pipeline stage)."""
    textbook: list[PredictedCall]
    """conventions §2 calls of the shown rank."""
    networks: list[NetworkEstimate] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def calls(self) -> list[PredictedCall]:
        return self.per_rank[self.shown_rank]

    @property
    def volumes(self) -> list[OpVolume]:
        return aggregate(self.calls)

    @property
    def textbook_volumes(self) -> list[OpVolume]:
        return aggregate(self.textbook)

    def speedups(self) -> list[float]:
        """Step time of the first network over each network's (no overlap)."""
        if not self.networks:
            return []
        base = self.networks[0].step_time_s
        return [base / n.step_time_s if n.step_time_s > 0 else float("inf") for n in self.networks]

    def to_dict(self) -> dict[str, Any]:
        vols = self.volumes
        ops = []
        for v in vols:
            row = {k: val for k, val in v.to_dict().items()}
            row["time_s"] = {n.name: n.op_times_s.get((v.op, v.role), 0.0) for n in self.networks}
            ops.append(row)
        networks = []
        for n, speedup in zip(self.networks, self.speedups(), strict=True):
            networks.append({**n.to_dict(), "speedup": speedup})
        return {
            "job": self.job.describe(),
            "settings": self.settings,
            "rank": self.shown_rank,
            "per_step": {
                "ops": ops,
                "total_bytes": sum(v.bytes for v in vols),
                "total_wire_bytes": sum(v.wire_bytes for v in vols),
                "total_wire_bytes_study_b": sum(v.wire_bytes_b for v in vols),
                "by_role": by_role(vols),
            },
            "textbook": {
                "ops": [v.to_dict() for v in self.textbook_volumes],
                "total_bytes": sum(v.bytes for v in self.textbook_volumes),
                "total_wire_bytes": sum(v.wire_bytes for v in self.textbook_volumes),
                "total_wire_bytes_study_b": sum(v.wire_bytes_b for v in self.textbook_volumes),
            },
            "ranks": [
                {
                    "rank": r,
                    "coords": self.job.dims.coords(r),
                    "total_bytes": sum(c.total_bytes for c in calls),
                    "total_wire_bytes": sum(c.wire_bytes for c in calls),
                }
                for r, calls in sorted(self.per_rank.items())
            ],
            "networks": networks,
        }


def modelled_ranks(job: Job) -> list[int]:
    """One rank per pipeline stage, at dp and tp index 0."""
    d = job.dims
    return [d.rank_of(0, 0, p) for p in range(d.pp)]


def predict(
    job: Job,
    networks: Sequence[NetworkProfile] = (),
    *,
    intra: NetworkProfile | None = None,
    gpus_per_node: int = 1,
    algorithm: str = "ring",
    tflops: float = DEFAULT_TFLOPS,
    nics_per_node: int = 1,
) -> Prediction:
    """Predict ``job``'s steady step; time it on each inter-node profile in ``networks``.

    ``intra`` is the link inside a node (default ``nvlink``), used for groups
    whose ranks share a node when ``gpus_per_node`` > 1.
    """
    check_job(job, gpus_per_node, nics_per_node, tflops)
    per_rank = {r: rank_calls(job, r) for r in modelled_ranks(job)}
    shown = max(per_rank, key=lambda r: (sum(c.wire_bytes for c in per_rank[r]), -r))
    intra = intra or get_profile("nvlink")
    estimates = []
    for net in networks:
        fabric = Fabric(
            inter=net,
            intra=intra,
            gpus_per_node=gpus_per_node,
            algorithm=algorithm,
            nics_per_node=nics_per_node,
        )
        estimates.append(estimate(job, per_rank, shown, fabric, tflops))
    settings = {
        "gpus_per_node": gpus_per_node,
        "nics_per_node": nics_per_node,
        "intra": intra.name,
        "algorithm": algorithm,
        "tflops": tflops,
    }
    return Prediction(
        job=job,
        shown_rank=shown,
        per_rank=per_rank,
        textbook=textbook_calls(job, shown),
        networks=estimates,
        settings=settings,
    )
