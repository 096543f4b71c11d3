"""Tensor-parallel calls exactly as ``commlens.workloads.tp`` issues them.

Per micro-batch, with S_a = s·b·h·βa (activations ``[s, b, h]``) and the
tp group of the rank (``workloads/tp.py``, ``layers.py``, ``models/*.py``):

- word embedding (first stage; T5: encoder and decoder inputs): forward
  all-reduce of the partial embeddings; sequence parallel: reduce-scatter
  forward, all-gather backward.
- every self-attention or MLP sublayer: its column-parallel input is an
  identity forward / all-reduce backward, its row-parallel output an
  all-reduce forward; sequence parallel: all-gather forward + reduce-scatter
  backward at the input, reduce-scatter forward + all-gather backward at the
  output. T5's cross-attention adds a column-parallel query (same as above)
  and a column-parallel key/value over the encoder output (one more input
  collective per decoder layer).
- activation recomputation reruns each layer's forward collectives in
  backward, up to the last one whose output backward needs (PyTorch's
  non-reentrant checkpoint stops early): all but a pre-norm layer's final
  row-parallel output (GPT, T5); all of them for post-norm BERT.
- LM head (last stage): its column-parallel input as above (GPT, T5, S_a);
  BERT's MLM head works on the b·m masked tokens only, after a forward-only
  sequence all-gather under SP (its gradient is split, not reduced).
- vocab-parallel cross entropy: three forward all-reduces of one fp32 per
  loss token (max, target logit, sum of exponentials).
- sequence parallel, once per step after backward: one all-reduce of the
  flattened gradients of the parameters that saw only this rank's part of
  the sequence (norms on the residual stream, row-parallel biases, position
  and token-type embeddings; not BERT's replicated MLM-head norm).
"""

from __future__ import annotations

import math

from commlens.job.models import (
    masked_per_sequence,
    param_shapes,
    sequence_parallel_partial,
    stage_layers,
)
from commlens.job.spec import Job
from commlens.predict.calls import PredictedCall


def seq_parallel_bytes(job: Job, rank: int) -> int:
    """Bytes of the gradients summed over tp after backward under sequence parallelism."""
    c = job.dims.coords(rank)
    params = param_shapes(job.model, job.dims.tp, c["tp"], job.dims.pp, c["pp"])
    numel = sum(math.prod(shape) for name, shape in params if sequence_parallel_partial(name))
    return numel * job.dtype_bytes


def tp_calls(job: Job, rank: int) -> list[PredictedCall]:
    """The tp-group calls of ``rank`` in one step."""
    d, cfg = job.dims, job.model
    if d.tp == 1:
        return []
    group = tuple(d.group_of(rank, "tp"))
    stage = d.coords(rank)["pp"]
    first, last = stage == 0, stage == d.pp - 1
    k, b, s, h = job.microbatches, job.micro_batch, job.seq_len, cfg.hidden
    act = s * b * h * job.dtype_bytes
    sp = job.sequence_parallel
    rec = job.recompute
    counts = {"all_reduce": 0, "all_gather": 0, "reduce_scatter": 0}

    def column_input(n: int, reruns: int = 0) -> None:
        # column-parallel entries: AR backward; SP: AG forward (+ reruns) and RS backward
        if sp:
            counts["all_gather"] += n + reruns
            counts["reduce_scatter"] += n
        else:
            counts["all_reduce"] += n

    def row_output(n: int, reruns: int = 0) -> None:
        # row-parallel exits: AR forward (+ reruns); SP: RS forward (+ reruns) and AG backward
        if sp:
            counts["reduce_scatter"] += n + reruns
            counts["all_gather"] += n
        else:
            counts["all_reduce"] += n + reruns

    if cfg.arch == "t5":
        enc, dec = cfg.layers, cfg.decoder_layers
        row_output(2)  # encoder and decoder word embeddings
        column_input(2 * enc + 4 * dec, rec * (2 * enc + 4 * dec))  # qkv, fc1 (+ cross q, kv)
        row_output(2 * enc + 3 * dec, rec * (enc + 2 * dec))  # proj, fc2 (+ cross proj)
        column_input(1)  # LM head
    else:
        layers = len(stage_layers(cfg.layers, d.pp, stage))
        if first:
            row_output(1)  # word embedding
        column_input(2 * layers, rec * 2 * layers)  # qkv, fc1
        # proj, fc2; recomputation stops early, after the last tensor backward needs: a
        # pre-norm layer's fc2 output feeds only the residual add and is not recomputed,
        # BERT's post-norm ln2 saves it, so BERT reruns both
        row_output(2 * layers, rec * (2 if cfg.arch == "bert" else 1) * layers)
        if last and cfg.arch == "gpt":
            column_input(1)  # LM head
    calls = [
        PredictedCall(op, "tp", group, act, n * k, "forward/backward", "activations")
        for op, n in counts.items()
        if n
    ]
    if sp:
        size = seq_parallel_bytes(job, rank)
        if size:
            calls.append(
                PredictedCall(
                    "all_reduce", "tp", group, size, 1, "other", "sequence-parallel grads"
                )
            )
    if not last:
        return calls
    loss_tokens = s * b
    if cfg.arch == "bert":
        loss_tokens = b * masked_per_sequence(s)
        if sp:  # forward-only gather of the sequence before the replicated head
            calls.append(
                PredictedCall("all_gather", "tp", group, act, k, "forward", "MLM head input")
            )
        head = loss_tokens * h * job.dtype_bytes
        calls.append(
            PredictedCall("all_reduce", "tp", group, head, k, "backward", "MLM head input grad")
        )
    calls.append(
        PredictedCall(
            "all_reduce", "tp", group, loss_tokens * 4, 3 * k, "forward", "vocab-parallel loss"
        )
    )
    return calls
