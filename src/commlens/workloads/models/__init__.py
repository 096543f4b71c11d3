"""The GPT, BERT and T5 models, one file each, built as one rank's shard.

Every model's ``forward(batch, hidden=None)`` takes one micro-batch (a dict of
``[b, s]`` tensors) and, on a pipeline stage other than the first, the hidden
states received from the previous stage. It returns the hidden states
``[s(/tp), b, h]`` to send on, or, on the last stage, the mean loss.
"""

from __future__ import annotations

from torch import nn

from commlens.job.models import ModelConfig, check_layout
from commlens.workloads.models.bert import BERT
from commlens.workloads.models.gpt import GPT
from commlens.workloads.models.t5 import T5
from commlens.workloads.tp import TPContext

__all__ = ["BERT", "GPT", "T5", "build_model"]


def build_model(
    cfg: ModelConfig, tp: TPContext | None = None, pp: int = 1, stage: int = 0
) -> nn.Module:
    """The part of ``cfg``'s model that one rank of a tp × pp layout holds (uninitialized)."""
    tp = tp or TPContext()
    check_layout(cfg, tp.size, pp)
    if cfg.arch == "gpt":
        return GPT(cfg, tp, pp, stage)
    if cfg.arch == "bert":
        return BERT(cfg, tp, pp, stage)
    return T5(cfg, tp)
