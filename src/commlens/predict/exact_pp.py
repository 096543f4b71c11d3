"""Pipeline-parallel calls exactly as the workloads' schedules issue them.

Per micro-batch, a stage sends its output activations ``[s(/tp), b, h]``
(÷tp under sequence parallelism, whose residual stream is split) to the next
stage and receives their gradient back; it receives its input from the
previous stage and sends that input's gradient back. GPipe and 1F1B issue the
same transfers in a different order. After the last backward, the first and
last stage all-reduce the gradient of the tied word embedding
``[V/tp, h]`` in their ``pp_embedding`` group (role pp).
"""

from __future__ import annotations

from commlens.job.spec import Job
from commlens.predict.calls import PredictedCall


def pp_calls(job: Job, rank: int) -> list[PredictedCall]:
    """The pipeline calls of ``rank`` in one step."""
    d, cfg = job.dims, job.model
    if d.pp == 1:
        return []
    c = d.coords(rank)
    stage, k = c["pp"], job.microbatches
    rows = job.seq_len // d.tp if job.sequence_parallel else job.seq_len
    act = rows * job.micro_batch * cfg.hidden * job.dtype_bytes
    calls = []
    if stage < d.pp - 1:
        nxt = d.rank_of(c["dp"], c["tp"], stage + 1)
        calls.append(
            PredictedCall("send", "pp", (rank, nxt), act, k, "forward", "activations to next stage")
        )
        calls.append(
            PredictedCall(
                "recv", "pp", (rank, nxt), act, k, "backward", "gradients from next stage"
            )
        )
    if stage > 0:
        prev = d.rank_of(c["dp"], c["tp"], stage - 1)
        calls.append(
            PredictedCall(
                "recv", "pp", (rank, prev), act, k, "forward", "activations from previous"
            )
        )
        calls.append(
            PredictedCall("send", "pp", (rank, prev), act, k, "backward", "gradients to previous")
        )
    if stage in (0, d.pp - 1):
        group = tuple(d.embedding_group(rank))
        size = cfg.vocab // d.tp * cfg.hidden * job.dtype_bytes
        calls.append(
            PredictedCall(
                "all_reduce",
                "pp",
                group,
                size,
                1,
                "backward",
                "tied embedding grad",
                family="embedding",
            )
        )
    return calls
