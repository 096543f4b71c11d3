"""A nanoGPT-style training script (gloo, CPU): a small GPT under DDP, gradient
accumulation by toggling ``require_backward_grad_sync``, an evaluation on rank 0
only every few iterations, no annotation."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

import commlens
from tests.frameworks.observe import profiled_ops

MAX_ITERS = 4
ACCUM = 2
EVAL_INTERVAL = 2
VOCAB, BLOCK, EMBD, HEADS = 64, 16, 32, 2


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBD)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(EMBD)
        self.mlp = nn.Sequential(nn.Linear(EMBD, 4 * EMBD), nn.GELU(), nn.Linear(4 * EMBD, EMBD))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.h = nn.ModuleList([Block(), Block()])
        self.ln_f = nn.LayerNorm(EMBD)
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def _batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    data = torch.randint(0, VOCAB, (4, BLOCK + 1), generator=gen)
    return data[:, :-1], data[:, 1:]


def job(rank: int, world: int, out: str) -> dict[str, Any]:
    """nanoGPT's loop: evaluate on rank 0 at every EVAL_INTERVAL-th iteration, then
    ACCUM micro-steps (gradients synced on the last), clip, step. Returns the
    profiler's c10d calls and the optimizer steps taken."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile

    with commlens.capture(out):
        dist.init_process_group("gloo")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(1337)
            raw = GPT()
            model = DDP(raw)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            gen = torch.Generator().manual_seed(rank)
            steps = 0
            for it in range(MAX_ITERS):
                if it % EVAL_INTERVAL == 0 and rank == 0:
                    model.eval()
                    with torch.no_grad():
                        losses = [raw(*_batch(gen)).item() for _ in range(2)]
                    assert all(math.isfinite(v) for v in losses)
                    model.train()
                for micro in range(ACCUM):
                    model.require_backward_grad_sync = micro == ACCUM - 1
                    (model(*_batch(gen)) / ACCUM).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                steps += 1
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return {"ops": seen, "steps": steps}
