"""validate on traced runs (no model in the manifest): held against the job's own communication.

A real DDP job on gloo (2 ranks, gradient accumulation with no_sync) traced with
``commlens.capture``: its bucket all-reduces per synced step are constant and equal
to the gradient bytes of the model (an independent count: the parameters' sizes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.analysis import open_run, step_summary, step_table
from commlens.analysis.coverage import headline_coverage
from commlens.analysis.expectations import GRADIENTS
from commlens.cli.main import main
from tests.distributed import run_ranks

ACCUM = 2
STEPS = 4


def _ddp_job(rank: int, world: int, out: str) -> int:
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commlens

    with commlens.capture(out):
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 8)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(STEPS):
            for micro in range(ACCUM):
                sync = micro == ACCUM - 1
                with contextlib.nullcontext() if sync else model.no_sync():
                    model(torch.randn(4, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
            commlens.step()
        dist.destroy_process_group()
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    out = tmp_path_factory.mktemp("traced") / "run"
    grad_bytes = run_ranks(_ddp_job, 2, str(out))
    return out, grad_bytes[0]


def _validate(run: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["validate", str(run), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_traced_ddp_run_is_held_not_refused(
    ddp_run: tuple[Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    run, grad_bytes = ddp_run
    code, out = _validate(run, capsys)
    assert code == 0 and out["ok"] and out["traced"]
    assert out["steps"] == list(range(1, STEPS))  # set-up (step -1) and step 0 left out
    with open_run(run) as view:  # the report's headline covers the same steps
        assert headline_coverage(view).steps == (1, STEPS)
        kinds = {r["step"]: r["kind"] for r in step_summary(step_table(view)).to_pylist()}
    assert all(kind == ("setup" if step < 0 else "step") for step, kind in kinds.items())
    by_name = {(e["name"], e["pg_name"]): e for e in out["expectations"]}
    dp = [e for (name, _), e in by_name.items() if name.startswith("dp all-reduce bytes per")]
    assert len(dp) == 1 and dp[0]["formed"] and dp[0]["ok"]
    # the bucket all-reduces of a synced step carry every gradient once
    assert f"{grad_bytes:,} bytes in each of " in dp[0]["detail"]
    # the capture noted what DDP wrapped: the gradient check is formed, and holds
    grads = [e for e in out["expectations"] if e["name"] == GRADIENTS]
    assert len(grads) == 1 and grads[0]["formed"] and grads[0]["ok"], grads
    assert f"{grad_bytes // 4:,} gradient elements" in grads[0]["detail"]
    assert f"{grad_bytes:,} bytes, in each of" in grads[0]["detail"]
    assert not [e for e in out["expectations"] if not e["formed"]]
    assert main(["validate", str(run)]) == 0


def test_traced_run_with_a_bucket_dropped_fails(
    ddp_run: tuple[Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(ddp_run[0], run)
    path = run / "rank-00001.parquet"
    table = pq.read_table(path)
    ops, steps = table["op"].to_pylist(), table["step"].to_pylist()
    last = max(steps)
    drop = next(
        i for i, pair in enumerate(zip(ops, steps, strict=True)) if pair == ("all_reduce", last)
    )
    pq.write_table(table.filter(pa.array([i != drop for i in range(table.num_rows)])), path)
    code, out = _validate(run, capsys)
    assert code == 1 and not out["ok"]
    bad = [e for e in out["expectations"] if e["formed"] and not e["ok"]]
    assert {e["name"] for e in bad} >= {"dp all-reduce bytes per synced step constant"}


def _fsdp_job(rank: int, world: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    import commlens

    with commlens.capture(out):
        dist.init_process_group("gloo", rank=rank, world_size=world)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(STEPS):
            model(torch.randn(4, 16)).sum().backward()
            opt.step()
            opt.zero_grad()
            commlens.step()
        dist.destroy_process_group()


def test_traced_fsdp2_run_holds_its_sharded_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run_ranks(_fsdp_job, 2, str(run))
    code, out = _validate(run, capsys)
    assert code == 0 and out["ok"], out
    names = {e["name"] for e in out["expectations"] if e["formed"] and e["ok"]}
    assert {"all_gather bytes per step constant", "reduce_scatter bytes per step constant"} <= names
    grads = [e for e in out["expectations"] if e["name"] == GRADIENTS]  # its reduce-scatters
    assert len(grads) == 1 and grads[0]["formed"] and grads[0]["ok"], grads


def test_model_runs_fold_setup_into_step_0_and_leave_out_ddp_bookkeeping() -> None:
    from commlens.predict.validate import modelled_events

    events = pa.table(
        {
            "step": [-1, -1, -1, 1, 1],
            "op": ["all_gather", "broadcast", "broadcast", "broadcast", "all_reduce"],
            "api": ["c10d", "c10d", "python", "c10d", "c10d"],
            "dtype": ["int64", "int64", "float32", "int32", "float32"],
        }
    )
    kept, left_out = modelled_events(events)
    assert left_out == 3
    assert kept.column("op").to_pylist() == ["broadcast", "all_reduce"]
    assert kept.column("step").to_pylist() == [0, 1]
