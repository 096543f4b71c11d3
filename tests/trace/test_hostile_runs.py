"""Damaged and hostile run directories: one clear line, or a warning and the rest of the run.

Each case copies ``tests/data/tiny_run`` (4 ranks) and damages it one way. A
damaged rank file costs that rank only (a warning; the report covers ranks 0,
2 and 3); a bad ``run.json`` is a one-line error naming the file; a bad field
in a rank's metadata is a warning and that field is ignored. No case may raise,
hang or take more than a moment.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens import load_run
from commlens.cli.main import main
from commlens.errors import RunFormatError
from commlens.trace.manifest import read_manifest
from commlens.trace.reader import open_run

DATA = Path(__file__).parent.parent / "data"
RANK1 = "rank-00001.parquet"
Damage = Callable[[Path], None]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "tiny_run"))


def _edit_json(name: str, change: Callable[[dict[str, Any]], None]) -> Damage:
    def damage(run: Path) -> None:
        data = json.loads((run / name).read_text())
        change(data)
        (run / name).write_text(json.dumps(data))

    return damage


def _set(name: str, key: str, value: Any) -> Damage:
    return _edit_json(name, lambda d: d.__setitem__(key, value))


def _set_clock(key: str, value: Any) -> Damage:
    return _edit_json("rank-00001.json", lambda d: d["clock"].__setitem__(key, value))


def _write_json_text(name: str, text: str) -> Damage:
    def damage(run: Path) -> None:
        (run / name).write_text(text)

    return damage


def _corrupt_page(run: Path) -> None:
    """Flip the bytes of rank 1's ``t_issue_ns`` data page; the footer stays intact."""
    file = run / RANK1
    chunk = pq.ParquetFile(file).metadata.row_group(0).column(15)
    assert chunk.path_in_schema == "t_issue_ns"
    data = bytearray(file.read_bytes())
    start = chunk.data_page_offset + 20
    for i in range(start, start + chunk.total_compressed_size - 30):
        data[i] ^= 0xFF
    file.write_bytes(bytes(data))


def _replace_column(name: str, values: Callable[[int], pa.Array]) -> Damage:
    def damage(run: Path) -> None:
        file = run / RANK1
        pf = pq.ParquetFile(file)
        table = pf.read()
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, values(table.num_rows))
        pq.write_table(table.replace_schema_metadata(pf.schema_arrow.metadata), file)

    return damage


def _size(n: int) -> Damage:
    def damage(run: Path) -> None:
        (run / RANK1).write_bytes(b"PAR1"[:n])

    return damage


def _symlink_loop(run: Path) -> None:
    (run / RANK1).unlink()
    (run / RANK1).symlink_to(RANK1)


def _directory(run: Path) -> None:
    (run / RANK1).unlink()
    (run / RANK1).mkdir()


def _half(run: Path) -> None:
    data = (run / RANK1).read_bytes()
    (run / RANK1).write_bytes(data[: len(data) // 2])


def _sizes_summing_past_int64(run: Path) -> None:
    """5000 events of 1 TiB each: every value within bounds, their total not."""
    file = run / RANK1
    pf = pq.ParquetFile(file)
    table = pa.concat_tables([pf.read()] * 420)
    i = table.schema.get_field_index("bytes_out")
    table = table.set_column(i, "bytes_out", pa.array([1 << 40] * table.num_rows, pa.int64()))
    pq.write_table(table.replace_schema_metadata(pf.schema_arrow.metadata), file)


def _run_json_directory(run: Path) -> None:
    (run / "run.json").unlink()
    (run / "run.json").mkdir()


INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

# Damage to rank 1's events file: a warning naming it, rank 1 left out.
RANK_FILE_DAMAGE: dict[str, Damage] = {
    "corrupt_page": _corrupt_page,
    "wrong_column_type": _replace_column(
        "t_issue_ns", lambda n: pa.array([str(i) for i in range(n)])
    ),
    "int64_max_end_time": _replace_column("t_end_ns", lambda n: pa.array([INT64_MAX] * n)),
    "int64_min_issue_time": _replace_column("t_issue_ns", lambda n: pa.array([INT64_MIN] * n)),
    "int64_min_wait": _replace_column("t_wait_ns", lambda n: pa.array([INT64_MIN] * n)),
    "int64_max_size": _replace_column("size_bytes", lambda n: pa.array([INT64_MAX] * n)),
    "sizes_summing_past_int64": _sizes_summing_past_int64,
    "symlink_loop": _symlink_loop,
    "directory": _directory,
    "empty": _size(0),
    "two_bytes": _size(2),
    "magic_only": _size(4),
    "half": _half,
}

# Bad values in a rank's metadata: a warning naming the file; the events are kept.
RANK_META_DAMAGE: dict[str, Damage] = {
    "offset_string": _set_clock("offset_ns", "abc"),
    "offset_int64_max": _set_clock("offset_ns", INT64_MAX),
    "drift_nested": _set_clock("drift", {"a": [1]}),
    "t_ref_negative": _set_clock("t_ref_ns", -5),
    "clock_list": _set("rank-00001.json", "clock", [1, 2]),
    "events_string": _set("rank-00001.json", "events", "12"),
    "steps_string": _set("rank-00001.json", "steps", "all"),
    "step_not_int": _set("rank-00001.json", "steps", [{"step": "a"}]),
    "step_bool": _set("rank-00001.json", "steps", [{"step": True, "t_start_ns": 0, "t_end_ns": 1}]),
    "step_time_int64_max": _set(
        "rank-00001.json", "steps", [{"step": 0, "t_start_ns": 0, "t_end_ns": INT64_MAX}]
    ),
    "rank_nested": _set("rank-00001.json", "rank", {"x": 1}),
    "rank_huge": _set("rank-00001.json", "rank", 10**12),
    "host_list": _set("rank-00001.json", "host", ["a"]),
    "status_number": _set("rank-00001.json", "status", 3),
    "not_json": _write_json_text("rank-00001.json", "{not json"),
    "run_json_rank_entry": _set("run.json", "ranks", {"x": {"rank": 1}}),
}

# A bad run.json: one line naming it.
FATAL: dict[str, tuple[Damage, str]] = {
    "world_size_string": (_set("run.json", "world_size", "4"), "world_size"),
    "world_size_null": (_set("run.json", "world_size", None), "world_size"),
    "world_size_nested": (_set("run.json", "world_size", {"n": 4}), "world_size"),
    "world_size_bool": (_set("run.json", "world_size", True), "world_size"),
    "world_size_zero": (_set("run.json", "world_size", 0), "world_size"),
    "world_size_1e12": (_set("run.json", "world_size", 10**12), "world_size"),
    "ranks_list": (_set("run.json", "ranks", [0, 1]), "ranks"),
    "ranks_string": (_set("run.json", "ranks", "0,1"), "ranks"),
    "backend_nested": (_set("run.json", "backend", {"x": 1}), "backend"),
    "deeply_nested": (_write_json_text("run.json", "[" * 100_000), "JSON"),
    "huge_integer": (
        _write_json_text("run.json", '{"world_size": ' + "9" * 5000 + "}"),
        "JSON",
    ),
    "run_json_directory": (_run_json_directory, "regular file"),
}


def _report(run: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(["report", str(run), "--format", "json", "-o", str(out)])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("case", sorted(RANK_FILE_DAMAGE))
def test_a_damaged_rank_file_costs_that_rank_only(
    case: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RANK_FILE_DAMAGE[case](tiny)
    code, err = _report(tiny, tmp_path / "report.json", capsys)
    assert code == 0
    assert len(err) == 1 and err[0].startswith("commlens: warning: rank-00001.parquet")
    assert err[0].endswith("rank 1 skipped")
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["missing_ranks"] == [1]
    assert {r["rank"] for r in doc["ranks"] if r["ops"]} == {0, 2, 3}
    assert sum(op["count"] for op in doc["ops"]) > 0


@pytest.mark.parametrize("case", sorted(RANK_FILE_DAMAGE))
def test_loaded_and_lazy_runs_leave_out_the_same_rank(case: str, tiny: Path) -> None:
    RANK_FILE_DAMAGE[case](tiny)
    loaded = load_run(tiny, quiet=True)
    assert loaded.missing_ranks == [1] and loaded.ranks == [0, 2, 3]
    assert len(loaded.warnings) == 1
    view = open_run(tiny)
    try:
        # The whole events view reads (a damaged page shows only now, and is left out).
        rows = view.sql("SELECT rank, sum(t_end_ns - t_issue_ns) AS busy FROM events GROUP BY 1")
        assert sorted(rows.column("rank").to_pylist()) == [0, 2, 3]
        assert view.missing_ranks == [1]
        assert len(view.warnings) == 1 and "rank-00001.parquet" in view.warnings[0]
        ranks = view.sql("SELECT rank, status FROM ranks ORDER BY rank").to_pylist()
        assert [r["status"] for r in ranks if r["rank"] == 1] == ["missing"]
    finally:
        view.close()


@pytest.mark.parametrize("case", ["corrupt_page", "int64_max_end_time", "symlink_loop", "empty"])
def test_export_and_query_keep_the_other_ranks(
    case: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RANK_FILE_DAMAGE[case](tiny)
    out = tmp_path / "trace.json"
    assert main(["export", str(tiny), "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    pids = {e.get("pid") for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert len(pids) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("commlens: warning: rank-00001.parquet")
    assert err[-1].startswith("commlens export: wrote")
    sql = "SELECT DISTINCT rank FROM events ORDER BY rank"
    assert main(["query", str(tiny), sql, "--format", "json", "-o", str(out)]) == 0
    ranks = [row["rank"] for row in json.loads(out.read_text())["rows"]]
    # A damaged page is found only when a query reads it; the rank column is intact.
    assert ranks == ([0, 1, 2, 3] if case == "corrupt_page" else [0, 2, 3])


def test_a_query_reading_a_damaged_page_is_one_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _corrupt_page(tiny)
    code = main(["query", str(tiny), "SELECT sum(t_issue_ns) FROM events"])
    err = capsys.readouterr().err.splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith("commlens query: error:")


@pytest.mark.parametrize("case", sorted(RANK_META_DAMAGE))
def test_bad_rank_metadata_is_a_warning_and_the_events_stay(
    case: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RANK_META_DAMAGE[case](tiny)
    code, err = _report(tiny, tmp_path / "report.json", capsys)
    assert code == 0
    assert len(err) == 1 and err[0].startswith("commlens: warning: ")
    assert ("run.json" if case == "run_json_rank_entry" else "rank-00001.json") in err[0]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["missing_ranks"] == []
    assert {r["rank"] for r in doc["ranks"] if r["ops"]} == {0, 1, 2, 3}


def test_a_bad_clock_leaves_that_rank_unaligned(tiny: Path) -> None:
    good = load_run(tiny, quiet=True)
    RANK_META_DAMAGE["offset_string"](tiny)
    bad = load_run(tiny, quiet=True)
    t_good = good.events.filter(pa.compute.equal(good.events["rank"], 1))["t_issue_ns"]
    t_bad = bad.events.filter(pa.compute.equal(bad.events["rank"], 1))["t_issue_ns"]
    # The manifest's offset of rank 1 is 5 µs; without it the times stay as written.
    assert [b - a for a, b in zip(t_good.to_pylist(), t_bad.to_pylist(), strict=True)] == [
        -5000
    ] * len(t_good)
    info = read_manifest(tiny)
    assert info.ranks[1].clock is None and info.ranks[0].clock is not None
    assert "clock" not in info.data["ranks"]["1"]


@pytest.mark.parametrize("case", sorted(FATAL))
def test_a_bad_run_json_is_one_line(
    case: str, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, what = FATAL[case]
    damage(tiny)
    for command in (["report"], ["export", "-o", os.devnull], ["validate"]):
        code = main([command[0], str(tiny), *command[1:]])
        err = capsys.readouterr().err.splitlines()
        assert code == RunFormatError.exit_code
        assert len(err) == 1
        assert err[0].startswith(f"commlens {command[0]}: error: {tiny / 'run.json'}: ")
        assert what in err[0]


def test_compare_with_one_damaged_run(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = Path(shutil.copytree(tiny, tmp_path / "other"))
    _corrupt_page(other)
    assert main(["compare", str(tiny), str(other), "-o", str(tmp_path / "cmp.txt")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "rank-00001.parquet is damaged" in err[0]
    _set("run.json", "ranks", "x")(other)
    assert main(["compare", str(tiny), str(other)]) == RunFormatError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("commlens compare: error: ")


def test_a_huge_world_with_two_files_is_quick(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for rank in (2, 3):
        (tiny / f"rank-{rank:05d}.parquet").unlink()
        (tiny / f"rank-{rank:05d}.json").unlink()
    _set("run.json", "world_size", 1_000_000)(tiny)
    start = time.perf_counter()
    code, err = _report(tiny, tmp_path / "report.json", capsys)
    assert time.perf_counter() - start < 60  # about 1 s idle; quadratic checks took many minutes
    assert code == 0
    assert err == ["commlens: warning: ranks 2..999999: no events files (999998 ranks)"]
    doc = json.loads((tmp_path / "report.json").read_text())
    assert len(doc["missing_ranks"]) == 999_998


def test_a_world_too_large_is_refused_at_once(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _set("run.json", "world_size", 10**12)(tiny)
    start = time.perf_counter()
    assert main(["report", str(tiny)]) == RunFormatError.exit_code
    assert time.perf_counter() - start < 30  # no per-rank work: well under 1 s on an idle machine
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"commlens report: error: {tiny / 'run.json'}: world_size is 1000000000000, "
        "not an integer in 1..1000000"
    ]


def test_rank_numbers_out_of_bounds_and_odd_entries_are_skipped(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(tiny / "rank-00000.parquet", tiny / "rank-99999999999.parquet")
    (tiny / "rank-00009.json").mkdir()
    run = load_run(tiny)
    err = capsys.readouterr().err.splitlines()
    assert run.ranks == [0, 1, 2, 3] and run.missing_ranks == []
    assert len(err) == 2
    assert "rank-00009.json is not a regular file" in err[0]
    assert "rank-99999999999.parquet: rank out of bounds" in err[1]


def test_a_foreign_file_is_still_refused(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tiny / RANK1).write_text("hello")
    assert main(["report", str(tiny)]) == RunFormatError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not a Parquet file" in err[0]


@pytest.mark.parametrize(
    "workload",
    [
        {"model": "gpt-tiny", "scheme": "dp", "tp": "two"},
        {"model": "gpt-tiny", "scheme": "dp", "seq_len": {"n": 8}},
        {"model": "gpt-tiny", "scheme": "dp", "steps": [1]},
    ],
)
def test_validate_with_a_workload_of_bad_types_is_one_line(
    workload: dict[str, Any], tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _set("run.json", "workload", workload)(tiny)
    assert main(["validate", str(tiny)]) == RunFormatError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"commlens validate: error: {tiny}: the manifest's workload")
