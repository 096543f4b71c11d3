"""validate: synthetic events built from the prediction, and checked-in captured runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.job import ParallelDims, get_preset
from commlens.job.spec import Job
from commlens.predict.exact import rank_calls
from commlens.predict.validate import validate_events

DATA = Path(__file__).parent / "data"


def synthetic_events(job: Job, steps: int, spread: bool = False) -> pa.Table:
    """Events as the capture would record them if the model were exactly right."""
    rows: dict[str, list[object]] = {k: [] for k in ("rank", "step", "op", "role", "size_bytes")}
    for rank in range(job.dims.world_size):
        for step in range(steps):
            for call in rank_calls(job, rank, step):
                sizes = [call.size_bytes] * call.count
                if spread and call.count > 1:  # same total, different split
                    sizes[0] += 4
                    sizes[-1] -= 4
                for size in sizes:
                    rows["rank"].append(rank)
                    rows["step"].append(step)
                    rows["op"].append(call.op)
                    rows["role"].append(call.role)
                    rows["size_bytes"].append(size)
    return pa.table(rows)


JOBS = [
    Job(get_preset("gpt-tiny"), "dp", ParallelDims(2), seq_len=32),
    Job(get_preset("bert-tiny"), "zero3", ParallelDims(4), seq_len=32, microbatches=2),
    Job(
        get_preset("t5-tiny"),
        "tp",
        ParallelDims(2, dp=1, tp=2),
        seq_len=16,
        sequence_parallel=True,
        recompute=True,
    ),
    Job(
        get_preset("gpt-tiny"),
        "3d",
        ParallelDims(8, dp=2, tp=2, pp=2),
        seq_len=32,
        microbatches=4,
        schedule="gpipe",
    ),
]


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.model.name}-{j.scheme}")
def test_exact_events_pass(job: Job) -> None:
    result = validate_events(job, synthetic_events(job, 3), steps=3)
    assert result.ok, result.failures[:3]
    assert result.steps == [0, 1, 2]
    assert result.ranks == list(range(job.dims.world_size))


def test_dropping_one_collective_fails_naming_it() -> None:
    job = JOBS[3]
    events = synthetic_events(job, 3)
    victim = next(
        i
        for i, (r, s, op) in enumerate(
            zip(
                events["rank"].to_pylist(),
                events["step"].to_pylist(),
                events["op"].to_pylist(),
                strict=True,
            )
        )
        if r == 5 and s == 2 and op == "send"
    )
    mask = [i != victim for i in range(events.num_rows)]
    result = validate_events(job, events.filter(pa.array(mask)), steps=3)
    assert not result.ok
    assert [(c.rank, c.step, c.op, c.role) for c in result.failures] == [(5, 2, "send", "pp")]
    bad = [s for s in result.summary() if not s.ok]
    assert [(s.op, s.role) for s in bad] == [("send", "pp")]
    assert "1 calls captured" not in bad[0].explanation
    assert "captured" in bad[0].explanation and "predicted" in bad[0].explanation


def test_bytes_tolerance_and_unexpected_ops() -> None:
    job = JOBS[0]
    events = synthetic_events(job, 3)
    scaled = events.set_column(
        events.schema.get_field_index("size_bytes"),
        "size_bytes",
        pc.cast(pc.round(pc.multiply(events["size_bytes"], 1.005)), pa.int64()),
    )
    assert validate_events(job, scaled, steps=3, tolerance=0.01).ok
    assert not validate_events(job, scaled, steps=3, tolerance=0.001).ok
    extra = pa.concat_tables(
        [
            events,
            pa.table(
                {"rank": [0], "step": [1], "op": ["barrier"], "role": [""], "size_bytes": [0]}
            ),
        ]
    )
    result = validate_events(job, extra, steps=3)
    assert [(c.op, c.reason) for c in result.failures] == [
        ("barrier", "1 call(s) captured, none predicted")
    ]


def test_byte_totals_not_per_call_sizes_are_held() -> None:
    job = JOBS[1]
    assert validate_events(job, synthetic_events(job, 2, spread=True), steps=2).ok


def test_step0_is_held_unless_skipped() -> None:
    job = JOBS[0]
    events = synthetic_events(job, 2)
    assert validate_events(job, events, steps=2).steps == [0, 1]
    assert validate_events(job, events, steps=2, skip_step0=True).steps == [1]
    # DDP's step 0: one bucket and the start-up broadcast, unlike later steps
    step0 = events.filter(pc.equal(events["step"], 0))
    ops0 = sorted(step0["op"].to_pylist())
    assert ops0.count("broadcast") == 2 and ops0.count("all_reduce") == 2
    with pytest.raises(UsageError, match="nothing to hold"):
        validate_events(job, step0, steps=1, skip_step0=True)
    with pytest.raises(UsageError, match="no communication events"):
        validate_events(job, events.slice(0, 0), steps=2)


EXPECTED_OPS = {
    "gpt-tiny-pp-1f1b": {("send", "pp"), ("recv", "pp"), ("all_reduce", "pp")},
    "gpt-tiny-tp-sp": {("all_reduce", "tp"), ("all_gather", "tp"), ("reduce_scatter", "tp")},
    "gpt-tiny-zero1": {("all_reduce", "dp"), ("broadcast", "dp")},
    "gpt-tiny-zero3-3": {("all_gather", "dp"), ("reduce_scatter", "dp")},
    "gpt-tiny-3d-dp2-pp2": {
        ("all_reduce", "dp"),
        ("send", "pp"),
        ("recv", "pp"),
        ("all_reduce", "pp"),
    },
    "bert-tiny-3d-tp2-pp2-sp": {
        ("all_reduce", "tp"),
        ("all_gather", "tp"),
        ("reduce_scatter", "tp"),
        ("send", "pp"),
        ("recv", "pp"),
        ("all_reduce", "pp"),
    },
    "t5-tiny-tp4-recompute": {("all_reduce", "tp")},
}


@pytest.mark.parametrize("run", sorted(EXPECTED_OPS))
def test_cli_passes_on_captured_runs(run: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Runs captured by `commlens run` (gloo, 2 to 4 ranks, 3 steps); see
    # examples/validate_matrix.py for the whole matrix at two sequence lengths.
    assert main(["validate", str(DATA / run), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and not out["mismatches"]
    assert {(o["op"], o["role"]) for o in out["ops"]} == EXPECTED_OPS[run]


def test_cli_fails_naming_the_op_on_an_edited_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "gpt-tiny-pp-1f1b", run)
    path = run / "rank-00001.parquet"
    table = pq.read_table(path)
    ops, steps = table["op"].to_pylist(), table["step"].to_pylist()
    drop = next(
        i for i, (op, s) in enumerate(zip(ops, steps, strict=True)) if op == "all_reduce" and s == 1
    )
    keep = pa.array([i != drop for i in range(table.num_rows)])
    pq.write_table(table.filter(keep), path)
    assert main(["validate", str(run)]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "all_reduce/pp" in out.replace(" ", "")
