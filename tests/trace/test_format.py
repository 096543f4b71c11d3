"""The run format's contract, over runs written in the test by the real writer.

File names (:mod:`commlens.trace.layout`), the clock formula in its SQL and
numpy forms (:mod:`commlens.trace.align`), and missing ranks: the lazy view,
its numpy reads and the loaded run agree on each.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from commlens import load_run
from commlens.trace import layout
from commlens.trace.align import align_numpy, align_sql
from commlens.trace.files import open_files
from commlens.trace.manifest import Clock, merge_manifest, read_manifest
from commlens.trace.reader import open_run, step_windows
from commlens.trace.rundir import foreign_in_run
from commlens.trace.synthetic import T0_NS, ev, write_run

DRIFT = 2.0**-10
"""A drift that makes drift·(t − t_ref) an exact half for t − t_ref = 512 (mod 1024)."""


def _run(tmp_path: Path, world: int = 3) -> Path:
    events = [
        ev(r, "all_reduce", t, t + 1.5, pg_ranks=list(range(world)), step=i)
        for r in range(world)
        for i, t in enumerate((0.512, 1.536, 10.0, 2000.25))
    ]
    steps = {r: [(0.0, 1.0), (1.0, 2.0), (2.0, 20.0), (20.0, 3000.0)] for r in range(world)}
    run = write_run(
        tmp_path / "run", events, world_size=world, steps=steps, clock_offset_ns={1: 7_000}
    )
    merge_manifest(run)  # as the last rank to finish does
    return run


def _set_drift(run: Path, rank: int, drift: float) -> None:
    path = layout.rank_meta_path(run, rank)
    meta = json.loads(path.read_text())
    meta["clock"]["drift"] = drift
    path.write_text(json.dumps(meta))


def _python_align(t: int, clock: Clock) -> int:
    """The formula as written, with Python's round (half to even)."""
    return t + clock.offset_ns + round(clock.drift * (t - clock.t_ref_ns))


def test_a_run_holds_the_files_the_layout_names(tmp_path: Path) -> None:
    run = _run(tmp_path)
    names = sorted(p.name for p in run.iterdir())
    want = [layout.MANIFEST, layout.MANIFEST_LOCK, layout.LIVE_LOCK]
    want += [layout.rank_file(run, r).name for r in range(3)]
    want += [layout.rank_meta_path(run, r).name for r in range(3)]
    assert names == sorted(want)
    assert all(foreign_in_run(p) is None for p in run.iterdir())  # --force may replace them
    found = open_files(run)
    assert found.files == {r: layout.rank_file(run, r) for r in range(3)}
    assert layout.RANK_EVENTS.match(layout.rank_events_name(12345))
    assert layout.PARTS_DIR.match(layout.parts_dir(run, 7).name)


def test_a_temporary_file_renamed_into_place_after_the_listing_is_not_foreign(
    tmp_path: Path,
) -> None:
    """A node joining a run lists it while another writes ``run.json`` (temporary file,
    then a rename): the listed temporary file is gone, not foreign (CI refused the join)."""
    run = _run(tmp_path)
    tmp = run / ".run.json.16121.tmp"
    tmp.write_text("{}")
    parts = layout.parts_dir(run, 0)
    parts.mkdir()
    (parts / "part-000001.tmp").write_text("")
    listed = sorted(run.iterdir())
    tmp.rename(run / "run.json")  # the writer finishes between the listing and the check
    (parts / "part-000001.tmp").rename(parts / "part-000001.bin")
    assert [foreign_in_run(p) for p in listed] == [None] * len(listed)
    gone = run / ".rank-00009.parts"  # a parts directory removed after the listing
    assert foreign_in_run(gone) is None
    (run / "notes.txt").write_text("mine")
    assert foreign_in_run(run / "notes.txt") == run / "notes.txt"


def test_the_names_are_the_documented_ones(tmp_path: Path) -> None:
    """The names themselves are the contract: other tools read runs by them."""
    assert (layout.MANIFEST, layout.MANIFEST_LOCK, layout.NIC_FILE) == (
        "run.json",
        ".run.lock",
        "nic.parquet",
    )
    assert layout.rank_file(tmp_path, 3).name == "rank-00003.parquet"
    assert layout.rank_meta_path(tmp_path, 3).name == "rank-00003.json"
    assert layout.parts_dir(tmp_path, 3).name == ".rank-00003.parts"
    assert layout.rank_file(tmp_path, 123456).name == "rank-123456.parquet"
    for name in ("run.json", ".run.json.123.tmp", "rank-00001.parquet", ".rank-00001.json.ab.tmp"):
        assert layout.OWN_FILES.match(name), name
    for name in ("notes.txt", "rank-1.parquet", "run.json.bak"):
        assert not layout.OWN_FILES.match(name), name


def test_sql_and_numpy_forms_agree_to_the_nanosecond() -> None:
    clock = Clock(offset_ns=-123_456, drift=DRIFT, t_ref_ns=T0_NS)
    deltas = [0, 1, 511, 512, 513, 1536, 2560, -512, -1536, 10**12 + 512, -(10**9) - 512]
    t = np.array([T0_NS + d for d in deltas], np.int64)
    con = duckdb.connect()
    con.register("e", pa.table({"t": t}))
    con.register("c", pa.table({"offset_ns": [clock.offset_ns], "drift": [clock.drift]}))
    con.execute(f"CREATE TABLE c2 AS SELECT *, {clock.t_ref_ns}::BIGINT AS t_ref_ns FROM c")
    sql = con.sql(f"SELECT {align_sql('e.t', 'c2')} AS t FROM e, c2").fetchnumpy()["t"]
    con.execute("CREATE TABLE none_c (offset_ns BIGINT, drift DOUBLE, t_ref_ns BIGINT)")
    kept = con.sql(f"SELECT {align_sql('e.t')} AS t FROM e LEFT JOIN none_c c ON FALSE")
    numpy = align_numpy(t, clock)
    assert sql.tolist() == numpy.tolist() == [_python_align(int(x), clock) for x in t]
    assert kept.fetchnumpy()["t"].tolist() == t.tolist()  # no clock: times kept
    # exact halves round to even, in both forms
    assert numpy[3] - t[3] + 123_456 == 0 and numpy[5] - t[5] + 123_456 == 2


def test_view_numpy_reads_and_loaded_run_align_alike(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _set_drift(run, 2, DRIFT)
    manifest = read_manifest(run)
    clocks = {r: info.clock for r, info in manifest.ranks.items()}
    assert clocks[1] == Clock(7_000, 0.0, T0_NS) and clocks[2] == Clock(0, DRIFT, T0_NS)
    loaded = load_run(run, quiet=True).events
    with open_run(run) as view:
        for rank in range(3):
            sql = view.sql(
                f"SELECT t_issue_ns, t_end_ns FROM events WHERE rank = {rank} ORDER BY seq"
            )
            numpy = view.read_rank(rank, ["t_issue_ns", "t_end_ns"])
            mine = loaded.filter(pa.compute.equal(loaded.column("rank"), rank))
            for col in ("t_issue_ns", "t_end_ns"):
                got = sql.column(col).to_pylist()
                assert got == numpy.column(col).to_pylist() == mine.column(col).to_pylist()
            raw = pa.parquet.read_table(layout.rank_file(run, rank), columns=["t_issue_ns"])
            clock = clocks[rank]
            assert clock is not None
            want = [_python_align(t, clock) for t in raw.column("t_issue_ns").to_pylist()]
            assert sql.column("t_issue_ns").to_pylist() == want
        assert view.time_span() == (
            view.row("SELECT min(t_issue_ns) FROM events")[0],  # type: ignore[index]
            view.row("SELECT max(t_end_ns) FROM events")[0],  # type: ignore[index]
        )
        steps = view.sql("SELECT * FROM steps ORDER BY rank, step")
    order = [("rank", "ascending"), ("step", "ascending")]
    assert steps.equals(step_windows(manifest).sort_by(order))
    by_rank = {(r["rank"], r["step"]): r for r in steps.to_pylist()}
    assert by_rank[(1, 0)]["t_start_ns"] == T0_NS  # written 7 µs early, moved back
    window = manifest.ranks[2].steps[3]
    assert by_rank[(2, 3)]["t_end_ns"] == _python_align(window.t_end_ns, clocks[2])
    assert by_rank[(2, 3)]["duration_s"] == (window.t_end_ns - window.t_start_ns) / 1e9


def test_missing_ranks_are_reported_alike_by_every_reader(tmp_path: Path) -> None:
    run = _run(tmp_path, world=4)
    layout.rank_file(run, 2).unlink()
    layout.rank_meta_path(run, 2).unlink()
    layout.rank_file(run, 3).write_bytes(b"PAR1")  # truncated: no footer
    loaded = load_run(run, quiet=True)
    with open_run(run) as view:
        assert view.missing_ranks == loaded.missing_ranks == [2, 3]
        assert view.warnings == loaded.warnings
        assert view.ranks == [0, 1]
        status = {r["rank"]: r["status"] for r in view.sql("SELECT * FROM ranks").to_pylist()}
        ranks = {r["rank"]: r["status"] for r in loaded.ranks_table().to_pylist()}
    assert status == ranks == {0: "ok", 1: "ok", 2: "missing", 3: "missing"}
    assert any("rank 2: no events file (rank-00002.parquet is missing)" in w for w in view.warnings)
    assert any("rank-00003.parquet is truncated" in w for w in view.warnings)
    assert sorted(set(loaded.events.column("rank").to_pylist())) == [0, 1]


def test_a_rank_known_to_have_no_events_is_not_missing(tmp_path: Path) -> None:
    events = [ev(0, "all_reduce", 0.0, 1.0, pg_ranks=[0])]
    run = write_run(tmp_path / "run", events, world_size=2)
    with open_run(run) as view:
        assert view.missing_ranks == [] and view.ranks == [0, 1]
    assert load_run(run, quiet=True).missing_ranks == []


def test_damage_found_while_reading_drops_the_rank_in_every_reader(tmp_path: Path) -> None:
    run = _run(tmp_path)
    with open_run(run) as view:
        path = layout.rank_file(run, 1)
        data = bytearray(path.read_bytes())
        data[4:200] = b"\xff" * 196  # pages garbled, footer intact
        path.write_bytes(bytes(data))
        loaded = view.load()
        assert view.missing_ranks == [1]
        assert any("rank-00001.parquet is damaged" in w for w in view.warnings)
    assert sorted(set(loaded.events.column("rank").to_pylist())) == [0, 2]


@pytest.mark.parametrize("steps", [(1, None), (None, 2), (1, 3)])
def test_a_step_range_applies_to_events_and_steps(tmp_path: Path, steps: tuple) -> None:
    run = _run(tmp_path)
    first, stop = steps
    with open_run(run, steps=steps) as view:
        for table in ("events", "steps"):
            seen = view.sql(f"SELECT DISTINCT step FROM {table}").column(0).to_pylist()
            assert seen and all(
                (first is None or s >= first) and (stop is None or s < stop) for s in seen
            )


@pytest.mark.parametrize("steps", [None, (1, 3)])
def test_the_sql_views_are_made_on_first_use_and_see_what_happened_before(
    tmp_path: Path, steps: tuple | None
) -> None:
    """A command that reads the ranks' files itself pays for no DuckDB views; views made
    later see the clocks moved and the ranks dropped before, like views made at once."""
    from commlens.analysis.matched.ops import read_ops

    run = _run(tmp_path)
    with open_run(run, steps=steps) as eager:
        eager.sql("SELECT 1")
        eager.move_clocks({2: 5_000})
        eager.drop_rank(1, "garbled")
        want_events = eager.sql("SELECT * FROM events ORDER BY rank, seq")
        want_steps = eager.sql("SELECT * FROM steps ORDER BY rank, step")
        want_ranks = eager.sql("SELECT * FROM ranks ORDER BY rank")
    with open_run(run, steps=steps) as lazy:
        ops = read_ops(lazy)
        assert lazy._con is None  # the matched-run layer read every rank without DuckDB
        windows = lazy.step_table()  # read_ops's steps: those of the range, by rank and step
        assert ops.step_index.tolist() == windows.column("step").to_pylist()
        assert ops.step_start.tolist() == windows.column("t_start_ns").to_pylist()
        lazy.move_clocks({2: 5_000})
        lazy.drop_rank(1, "garbled")
        assert lazy._con is None and lazy.ranks == [0, 2]
        assert lazy.sql("SELECT * FROM events ORDER BY rank, seq").equals(want_events)
        assert lazy.sql("SELECT * FROM steps ORDER BY rank, step").equals(want_steps)
        assert lazy.sql("SELECT * FROM ranks ORDER BY rank").equals(want_ranks)
        assert lazy.step_table().equals(want_steps)


def test_one_format_ranks_for_every_reader() -> None:
    import importlib

    from commlens.trace.files import format_ranks

    assert format_ranks([6, 0, 1, 2, 3]) == "0-3,6"
    assert format_ranks([5, 6, 7, 8, 9, 0, 2, 2]) == "0,2,5-9"
    assert format_ranks([3, 4]) == "3-4" and format_ranks([]) == format_ranks(None) == ""
    for name in ("report.document", "report.csv", "report.doctor", "doctor.diagnose",
                 "whatif.source", "report.build"):  # fmt: skip
        module = importlib.import_module(f"commlens.{name}")
        assert module.format_ranks is format_ranks, name


def test_the_nic_file_is_named_once() -> None:
    from commlens.netem import nic

    assert nic.NIC_FILE is layout.NIC_FILE
