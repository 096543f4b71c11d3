"""The textbook volumes of conventions §2, per rank per step.

These are the closed forms of the studies, shown beside the exact
prediction of what commlens's own workloads issue:

- DP: all-reduce of the rank's gradients ψβ, in 25 MiB buckets.
- ZeRO-1/2: reduce-scatter of ψβ + all-gather of ψβ.
- ZeRO-3: all-gather of ψβ in forward and again in backward + reduce-scatter of ψβ.
- TP: per layer per micro-batch 2 all-reduces forward and 2 backward of b·s·h·βa
  (3 + 3 for a T5 decoder layer, which has cross-attention), plus the
  embedding (forward), LM-head input (backward) and vocab-parallel loss
  (3 of b·s fp32 scalars) all-reduces; sequence parallel turns each b·s·h
  all-reduce into an all-gather and a reduce-scatter of the same S.
- PP: per micro-batch per boundary one activation send forward and one
  gradient send backward of b·s·h·βa, and the tied-embedding all-reduce of
  V·h·β / t between the first and last stage.
"""

from __future__ import annotations

import math

from commlens.job.models import param_shapes, stage_layers
from commlens.job.spec import Job
from commlens.predict.calls import PredictedCall


def shard_params(job: Job, rank: int) -> int:
    """ψ of ``rank``: parameters of its tp × pp shard."""
    c = job.dims.coords(rank)
    shapes = param_shapes(job.model, job.dims.tp, c["tp"], job.dims.pp, c["pp"])
    return sum(math.prod(shape) for _, shape in shapes)


def textbook_calls(job: Job, rank: int) -> list[PredictedCall]:
    """conventions §2 volumes of ``rank`` in one step, as calls."""
    d, cfg = job.dims, job.model
    beta = job.dtype_bytes
    c = d.coords(rank)
    out: list[PredictedCall] = []
    psi_bytes = shard_params(job, rank) * beta
    if d.dp > 1:
        g = tuple(d.group_of(rank, "dp"))
        if job.scheme == "zero3":
            out.append(
                PredictedCall("all_gather", "dp", g, psi_bytes, 2, what="parameters (fwd + bwd)")
            )
            out.append(PredictedCall("reduce_scatter", "dp", g, psi_bytes, 1, what="gradients"))
        elif job.scheme in ("zero1", "zero2"):
            out.append(PredictedCall("reduce_scatter", "dp", g, psi_bytes, 1, what="gradients"))
            out.append(
                PredictedCall("all_gather", "dp", g, psi_bytes, 1, what="updated parameters")
            )
        else:
            cap = 25 * 1024 * 1024
            full, rest = divmod(psi_bytes, cap)
            if full:
                out.append(PredictedCall("all_reduce", "dp", g, cap, full, what="gradient buckets"))
            if rest:
                out.append(
                    PredictedCall("all_reduce", "dp", g, rest, 1, what="last gradient bucket")
                )
    b, s, h, k = job.micro_batch, job.seq_len, cfg.hidden, job.microbatches
    act = b * s * h * beta
    first, last = c["pp"] == 0, c["pp"] == d.pp - 1
    if d.tp > 1:
        g = tuple(d.group_of(rank, "tp"))
        layers = len(stage_layers(cfg.layers, d.pp, c["pp"])) if cfg.arch != "t5" else cfg.layers
        n_ar = 4 * layers * k + 6 * cfg.decoder_layers * k
        n_ar += k if first else 0  # vocab-parallel embedding output (forward)
        n_ar += k if last else 0  # LM-head input gradient (backward)
        if job.sequence_parallel:
            out.append(PredictedCall("all_gather", "tp", g, act, n_ar, what="activations"))
            out.append(PredictedCall("reduce_scatter", "tp", g, act, n_ar, what="activations"))
        else:
            out.append(PredictedCall("all_reduce", "tp", g, act, n_ar, what="activations"))
        if last:
            out.append(
                PredictedCall("all_reduce", "tp", g, b * s * 4, 3 * k, what="vocab-parallel loss")
            )
    if d.pp > 1:
        stage = c["pp"]
        for peer_stage, op_fwd, op_bwd in (
            (stage + 1, "send", "recv"),
            (stage - 1, "recv", "send"),
        ):
            if 0 <= peer_stage < d.pp:
                peer = d.rank_of(c["dp"], c["tp"], peer_stage)
                pair = (rank, peer)
                out.append(PredictedCall(op_fwd, "pp", pair, act, k, what="activation (fwd)"))
                out.append(PredictedCall(op_bwd, "pp", pair, act, k, what="activation grad (bwd)"))
        if first or last:
            emb = tuple(d.embedding_group(rank))
            out.append(
                PredictedCall(
                    "all_reduce", "pp", emb, cfg.vocab * h * beta // d.tp, 1, what="tied embedding"
                )
            )
    return out
