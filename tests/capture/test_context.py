"""Each event knows its step, phase and the module that issued it; roles come from names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import run_ranks


class _SumGrad(torch.autograd.Function):
    """Identity forward; all-reduces the gradient in backward (Megatron's f)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(grad)
        return grad


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(_SumGrad.apply(x))
        dist.all_reduce(y)  # forward all-reduce inside block.0.inner
        return y


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.ModuleList([nn.Sequential(Inner())])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block[0](x)


class SyncSGD(torch.optim.SGD):
    """An optimizer that all-reduces a scalar in its step (like a grad-norm clip)."""

    def step(self, closure: Any = None) -> Any:
        norm = torch.ones(1)
        dist.all_reduce(norm)
        return super().step(closure)


def _train(rank: int, world: int, out: str) -> None:
    with commlens.capture(out):
        dist.init_process_group("gloo")
        tp = dist.new_group(list(range(world)), group_desc="tp")
        model = Net()
        opt = SyncSGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(4, 8, requires_grad=True)).sum().backward()
            opt.step()
        dist.all_reduce(torch.ones(1), group=tp)  # role from group_desc
        custom = dist.new_group(list(range(world)))
        commlens.set_group_role(custom, "ep")
        dist.all_reduce(torch.ones(1), group=custom)
        for _ in range(3):  # a loop without an optimizer marks its own steps
            dist.barrier()
            commlens.step()
        dist.destroy_process_group()


def test_step_phase_module_and_role(tmp_path: Path) -> None:
    run_ranks(_train, 2, str(tmp_path))
    run = commlens.load_run(tmp_path)
    rows = (
        run.duckdb()
        .execute("select step, phase, module, role, op from events where rank = 0 order by seq")
        .fetchall()
    )
    per_step = [
        (0, "forward", "block.0.0", "", "all_reduce"),
        (0, "backward", "block.0.0", "", "all_reduce"),  # the module whose backward ran it
        (0, "optimizer", "", "", "all_reduce"),
    ]
    assert rows[:3] == per_step
    assert rows[3:6] == [(1, *r[1:]) for r in per_step]
    # After the last optimizer step and before any next forward: still step 1.
    assert rows[6] == (1, "other", "", "tp", "all_reduce")
    assert rows[7] == (1, "other", "", "ep", "all_reduce")
    assert [r[0] for r in rows[8:]] == [1, 2, 3]  # explicit steps take over
    steps = run.manifest["ranks"]["0"]["steps"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]  # no set-up ops: no set-up window
    assert all(s["t_end_ns"] >= s["t_start_ns"] for s in steps)


def test_steps_run_from_forward_to_forward_with_a_tail() -> None:
    from commlens.capture.context import StepTracker

    tracker = StepTracker()
    tracker.install()
    try:
        model = nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = []
        for _ in range(2):
            for _micro in range(2):  # gradient accumulation: one step
                model(torch.ones(2, 4)).sum().backward()
                seen.append(tracker.step)
            opt.step()
            seen.append(tracker.step)  # after the optimizer step: still its step
        with torch.no_grad():
            model(torch.ones(2, 4))  # a forward after the last step: the tail
        seen.append(tracker.step)
    finally:
        tracker.uninstall()
    assert seen == [0, 0, 0, 1, 1, 1, 2]
    assert [(w["step"], w.get("segment")) for w in tracker.steps] == [
        (0, None),
        (1, None),
        (2, "after last step"),
    ]


def test_loss_between_forward_and_backward_is_forward() -> None:
    import sys

    from commlens.capture.context import StepTracker, current_phase_and_module

    tracker = StepTracker()
    tracker.install()
    try:
        model = nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        phases = []
        for _ in range(3):  # the same in every step, not only the first
            out = model(torch.ones(2, 4))
            phases.append(current_phase_and_module(tracker, sys._getframe(), "")[0])  # the loss
            out.sum().backward()
            phases.append(current_phase_and_module(tracker, sys._getframe(), "")[0])  # grad clip
            opt.step()
            phases.append(current_phase_and_module(tracker, sys._getframe(), "")[0])  # a metric
    finally:
        tracker.uninstall()
    assert phases == ["forward", "other", "other"] * 3


def _setup_then_train(rank: int, world: int, out: str) -> None:
    with commlens.capture(f"{out}/model"):
        dist.init_process_group("gloo")
        model = nn.Linear(4, 4)
        for p in model.parameters():  # the weights broadcast before training: set-up
            dist.broadcast(p.data, src=0)
        work = dist.all_reduce(torch.ones(1), async_op=True)  # completes after the forward
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
        work.wait()
        dist.destroy_process_group()


def _marked_loop(rank: int, world: int, out: str) -> None:
    with commlens.capture(f"{out}/marked"):  # no forwards: ops before the first mark are step 0
        dist.init_process_group("gloo")
        for _ in range(3):
            dist.all_reduce(torch.ones(1))
            commlens.step()
        dist.destroy_process_group()


def test_setup_ops_outside_constructors_are_setup_unless_no_forward_follows(
    tmp_path: Path,
) -> None:
    run_ranks(_setup_then_train, 2, str(tmp_path), timeout=60)
    run_ranks(_marked_loop, 2, str(tmp_path), timeout=60)
    model = commlens.load_run(tmp_path / "model")
    windows = [(s["step"], s.get("segment")) for s in model.manifest["ranks"]["0"]["steps"]]
    assert windows == [(-1, "setup"), (0, None), (1, None)]
    got = model.duckdb().execute("select op, step from events where rank = 0 order by seq")
    assert got.fetchall() == [("broadcast", -1), ("broadcast", -1), ("all_reduce", -1)]
    marked = commlens.load_run(tmp_path / "marked")
    assert [s["step"] for s in marked.manifest["ranks"]["0"]["steps"]] == [0, 1, 2]
    got = marked.duckdb().execute("select step from events where rank = 0 order by seq")
    assert [s for (s,) in got.fetchall()] == [0, 1, 2]


def test_a_module_under_two_roots_is_named_from_the_outermost() -> None:
    """A model run inside its wrapper and on its own (an evaluation) is two roots; an op
    is named from the wrapper's path whichever root a set happens to list first."""
    from torch import nn

    from commlens.capture.context import ModuleNames

    inner = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    wrapper = nn.Sequential()
    wrapper.add_module("module", inner)
    for roots in ([inner, wrapper], [wrapper, inner]):
        names = ModuleNames()
        assert names.find(roots, inner[1]) == "module.1"
        assert names.holder(roots, inner[0].weight) == "module.0"
        assert names.ordered(roots) == [wrapper, inner]
