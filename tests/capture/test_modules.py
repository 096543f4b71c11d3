"""The module of an op issued by a module's own hooks: a parallel style's input and
output redistributions belong to the module they wrap, in forward and in backward."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import commlens
from tests.distributed import event_rows, run_ranks

STEPS = 2


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(16, 32)
        self.w2 = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.relu(self.w1(x)))


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.mlp = _Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Layer(), _Layer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def _tp_sp(rank: int, world: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    warnings.simplefilter("ignore")
    with commlens.capture(out, align_clocks=False):
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        torch.manual_seed(0)
        model = _Model()
        plan = {
            "norm": SequenceParallel(),
            "mlp.w1": ColwiseParallel(input_layouts=Shard(1)),
            "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
        }
        for layer in model.layers:
            parallelize_module(layer, mesh, plan)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(rank)
        for _ in range(STEPS):
            model(torch.randn(2, 4, 16)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()


def test_parallel_styles_redistributions_name_their_module(tmp_path: Path) -> None:
    run_ranks(_tp_sp, 2, str(tmp_path), timeout=240)
    got = event_rows(
        tmp_path,
        "select rank, step, phase, op, module, count(*) from events "
        "where api = 'functional' and phase in ('forward', 'backward') group by all order by all",
    )
    for rank in range(2):
        for step in range(STEPS):
            mine = {(p, op, m): n for r, s, p, op, m, n in got if (r, s) == (rank, step)}
            want = {}
            for i in range(2):
                w1, w2 = f"layers.{i}.mlp.w1", f"layers.{i}.mlp.w2"
                want[("forward", "all_gather", w1)] = 1  # w1's input hook
                want[("backward", "reduce_scatter", w1)] = 1  # ... its transpose
                want[("forward", "reduce_scatter", w2)] = 1  # w2's output hook
                want[("backward", "all_gather", w2)] = 1  # ... its transpose
            assert mine == want, (rank, step, mine)


def _ddp_buckets(rank: int, world: int, out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    with commlens.capture(out, align_clocks=False):
        dist.init_process_group("gloo")
        torch.manual_seed(0)
        model = DDP(_Model(), bucket_cap_mb=0.001)  # about one parameter a bucket
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(STEPS):
            model(torch.randn(2, 4, 16)).square().mean().backward()
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()


def test_ddp_buckets_name_the_module_holding_their_last_gradient(tmp_path: Path) -> None:
    """DDP's bucket all-reduces run on a parameter's gradient accumulator: its module."""
    run_ranks(_ddp_buckets, 2, str(tmp_path))
    got = event_rows(
        tmp_path,
        "select step, module, count(*) from events "
        "where rank = 0 and op = 'all_reduce' and phase = 'backward' group by all order by all",
    )
    holders = {
        f"module.{name}" for name, m in _Model().named_modules() if list(m.parameters(False))
    }
    for step in range(STEPS):
        named = {m: n for s, m, n in got if s == step}
        assert named, (step, got)
        assert set(named) <= holders, (step, named)  # never "" or a module holding none
    last = {m for s, m, _ in got if s == STEPS - 1}
    assert len(last) >= 4  # the rebuilt buckets: one for each of several modules


def test_a_compiled_model_keeps_its_graph_and_its_modules() -> None:
    """Under torch.compile the module wrapper traces away: no graph break, and backward
    still names the compiled model."""
    import torch._dynamo

    from commlens.capture.context import StepTracker
    from commlens.capture.spans import current_node

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    model = _Model()
    compiled = torch.compile(model, backend="aot_eager")
    seen: list[object] = []
    tracker = StepTracker()
    tracker.install()
    try:
        x = torch.randn(2, 4, 16, requires_grad=True)
        y = compiled(x)
        y.register_hook(lambda g: seen.append(tracker.spans.module_of(current_node())))
        y.sum().backward()
    finally:
        tracker.uninstall()
    assert not torch._dynamo.utils.counters["graph_break"]
    assert torch.allclose(y, model(x))
    assert seen == [compiled]  # the compiled graph's backward is the module that ran it


def test_a_tied_weight_belongs_to_its_first_holder() -> None:
    """A weight two modules share (a tied embedding and head) is named as torch names it."""
    from commlens.capture.context import ModuleNames

    model = nn.ModuleDict({"wte": nn.Embedding(8, 4), "head": nn.Linear(4, 8, bias=False)})
    model["head"].weight = model["wte"].weight
    names = ModuleNames()
    (first,) = [name for name, _ in model.named_parameters()]
    assert names.holder([model], model["head"].weight) == first.removesuffix(".weight") == "wte"
    assert names.holder([model], nn.Parameter(torch.ones(1))) == ""  # held by no root
