"""Synthetic training data from a fixed seed, identical for every layout.

Each step has one global batch of ``dp · microbatches · micro_batch``
sequences, drawn from a generator seeded by (seed, step). Data-parallel rank
``d`` takes micro-batches ``d·k … d·k + k − 1`` (rows ``micro_batch`` at a
time), so a single process that accumulates all ``dp·k`` micro-batches sees
exactly the same tokens. Sequences follow a learnable pattern (arithmetic
progressions modulo the vocabulary), so the loss falls.
"""

from __future__ import annotations

import torch

from commlens.job.models import ModelConfig, masked_per_sequence

Batch = dict[str, torch.Tensor]


def _progressions(gen: torch.Generator, rows: int, length: int, vocab: int) -> torch.Tensor:
    start = torch.randint(0, vocab, (rows, 1), generator=gen)
    stride = torch.randint(1, 8, (rows, 1), generator=gen)
    return (start + stride * torch.arange(length)) % vocab  # [rows, length]


def global_batch(cfg: ModelConfig, seq_len: int, rows: int, step: int, seed: int) -> Batch:
    """All sequences of one step, as ``[rows, seq_len]`` tensors keyed by model input."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    v = cfg.vocab
    if cfg.arch == "gpt":
        seq = _progressions(gen, rows, seq_len + 1, v)
        return {"tokens": seq[:, :-1].contiguous(), "labels": seq[:, 1:].contiguous()}
    if cfg.arch == "bert":
        seq = _progressions(gen, rows, seq_len, v)
        m = masked_per_sequence(seq_len)
        pos = torch.rand(rows, seq_len, generator=gen).argsort(dim=1)[:, :m].sort(dim=1).values
        tokens = seq.scatter(1, pos, v - 1)  # the last id serves as [MASK]
        types = (torch.arange(seq_len) >= seq_len // 2).long().expand(rows, seq_len)
        return {
            "tokens": tokens,
            "types": types.contiguous(),
            "mask_pos": pos,
            "mask_labels": seq.gather(1, pos),
        }
    # T5: reproduce the input sequence reversed; the decoder sees it shifted right
    src = _progressions(gen, rows, seq_len, v)
    target = src.flip(1)
    dec = torch.cat([torch.zeros(rows, 1, dtype=torch.long), target[:, :-1]], dim=1)
    return {"enc_tokens": src, "dec_tokens": dec.contiguous(), "labels": target.contiguous()}


def microbatch(batch: Batch, index: int, micro_batch: int, device: torch.device) -> Batch:
    """Micro-batch ``index`` of a global batch (rows ``index·micro_batch`` onwards)."""
    rows = slice(index * micro_batch, (index + 1) * micro_batch)
    return {key: value[rows].to(device) for key, value in batch.items()}
