"""A Lightning Trainer job (DDP on gloo, CPU): gradient accumulation, a metric logged
with ``sync_dist`` in training and validation, validation at the end of the epoch
(after the last optimizer step). Run as ``python -m tests.frameworks.lightning_job
OUT``, by Lightning's own launcher (one process) or by torchrun (one per rank), under
``commlens trace``; each rank writes what torch.profiler saw to ``OUT/profiled-R.json``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

STEPS = 3
ACCUM = 2
BATCH = 4
WORLD = 2


def main(out: str) -> None:
    import lightning as L
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.data import DataLoader, TensorDataset

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            x, y = batch
            loss = (self.net(x) - y).square().mean()
            self.log("train_loss", loss, sync_dist=True)
            return loss

        def validation_step(self, batch: Any, _i: int) -> None:
            x, y = batch
            self.log("val_loss", (self.net(x) - y).square().mean(), sync_dist=True)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Profiled(L.Callback):
        """torch.profiler over the fit, from after the process group started."""

        def setup(self, trainer: Any, _module: Any, stage: str) -> None:
            self.prof = profile(activities=[ProfilerActivity.CPU])
            self.t0 = time.time_ns()
            self.prof.__enter__()

        def on_fit_end(self, trainer: Any, _module: Any) -> None:
            self.prof.__exit__(None, None, None)
            t1 = time.time_ns()
            from tests.frameworks.observe import profiled_ops

            seen = {"ops": profiled_ops(self.prof), "steps": trainer.global_step,
                    "t_ns": [self.t0, t1]}  # fmt: skip
            path = Path(out) / f"profiled-{trainer.global_rank}.json"
            path.write_text(json.dumps(seen))

    gen = torch.Generator().manual_seed(0)
    n = STEPS * ACCUM * BATCH * WORLD
    train = TensorDataset(torch.randn(n, 16, generator=gen), torch.randn(n, 4, generator=gen))
    val = TensorDataset(torch.randn(16, 16, generator=gen), torch.randn(16, 4, generator=gen))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy="ddp",
        max_epochs=1,
        accumulate_grad_batches=ACCUM,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Profiled()],
    )
    trainer.fit(Module(), DataLoader(train, batch_size=BATCH), DataLoader(val, batch_size=BATCH))


if __name__ == "__main__":
    main(sys.argv[1])


def fabric_fsdp2_job(rank: int, world: int, out: str) -> dict[str, int]:
    """Lightning Fabric with FSDP2 (``ModelParallelStrategy``: ``fully_shard`` over each
    layer and the model), trained through Fabric's module wrapper."""
    import os

    import torch.distributed as dist
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import fully_shard
    from torch.profiler import ProfilerActivity, profile

    import commlens
    from tests.frameworks.observe import profiled_ops

    os.environ.setdefault("LOCAL_RANK", str(rank))

    def parallelize(model: nn.Module, mesh: Any) -> nn.Module:
        for layer in model.layers:  # type: ignore[union-attr]
            fully_shard(layer, mesh=mesh["data_parallel"])
        fully_shard(model, mesh=mesh["data_parallel"])
        return model

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 16)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    with commlens.capture(out, align_clocks=False):
        strategy = ModelParallelStrategy(parallelize, data_parallel_size=world,
                                         tensor_parallel_size=1)  # fmt: skip
        fabric = Fabric(accelerator="cpu", devices=world, strategy=strategy)
        fabric.launch()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            torch.manual_seed(0)
            model = fabric.setup(Net())
            opt = fabric.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
            torch.manual_seed(rank)
            for _ in range(STEPS):
                fabric.backward(model(torch.randn(4, 16)).square().mean())
                opt.step()
                opt.zero_grad()
        seen = profiled_ops(prof)
        dist.destroy_process_group()
    return seen
