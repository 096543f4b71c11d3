"""Deterministic initialization that is the same for every layout.

Each parameter is drawn whole from a generator seeded by (seed, its global
name) and each rank keeps its slice, so a tensor-parallel shard equals the
matching slice of a single-process model (on the same device type), and the last
pipeline stage's copy of the tied embedding (``lm_head.weight``) equals the
first stage's. One full parameter exists at a time, on the training device.
"""

from __future__ import annotations

import math
import zlib

import torch
from torch import nn

from commlens.job.models import ModelConfig
from commlens.workloads.tp import TPContext

STD = 0.02
# Parameters that are the same tensor as another one in a single-process model.
TIED = {"lm_head.weight": "embed.word.weight"}


def _seed(seed: int, name: str) -> int:
    return zlib.crc32(f"{seed}/{name}".encode())


@torch.no_grad()
def init_parameters(model: nn.Module, cfg: ModelConfig, tp: TPContext, seed: int) -> None:
    """Fill ``model``'s parameters: norms 1, biases 0, weights N(0, 0.02) (output
    projections scaled by 1/√(2·layers), as Megatron does), sliced for this tp rank."""
    norms = {
        id(p)
        for m in model.modules()
        if isinstance(m, nn.LayerNorm | nn.RMSNorm)
        for p in m.parameters(recurse=False)
    }
    out_std = STD / math.sqrt(2 * cfg.total_layers)
    for name, param in model.named_parameters():
        if id(param) in norms:
            param.fill_(1.0 if name.endswith("weight") else 0.0)
            continue
        if name.endswith("bias") and param.dim() == 1:
            param.zero_()
            continue
        dim = getattr(param, "tp_dim", None)
        shape = list(param.shape)
        if dim is not None:
            shape[dim] *= tp.size
        std = out_std if name.endswith(("proj.weight", "fc2.weight")) else STD
        # drawn on the parameter's device: every rank of a job draws the same numbers
        gen = torch.Generator(device=param.device).manual_seed(_seed(seed, TIED.get(name, name)))
        full = torch.empty(shape, device=param.device).normal_(0.0, std, generator=gen)
        if dim is not None:
            full = full.narrow(dim, tp.rank * param.shape[dim], param.shape[dim])
        param.copy_(full)
