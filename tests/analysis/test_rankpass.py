"""Opening runs lazily: same answers as load_run, missing/truncated/foreign files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens import load_run
from commlens.analysis import op_table, open_run, step_table
from commlens.errors import RunFormatError
from commlens.trace.synthetic import write_parts

DATA = Path(__file__).parent.parent / "data"


def _close(x: dict[str, object], y: dict[str, object]) -> bool:
    assert x.keys() == y.keys()
    for key in x:
        if isinstance(x[key], float):
            assert x[key] == pytest.approx(y[key], rel=1e-12), key
        else:
            assert x[key] == y[key], key
    return True


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "tiny_run"))


def test_lazy_view_matches_loaded_run(tiny: Path) -> None:
    lazy = open_run(tiny)
    loaded = open_run(load_run(tiny, quiet=True))
    for table in (op_table, step_table):
        a, b = table(lazy).to_pylist(), table(loaded).to_pylist()
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):  # float sums may differ in the last bit
            assert _close(x, y)
    cols = "rank, seq, t_issue_ns, t_end_ns"
    a = lazy.sql(f"SELECT {cols} FROM events ORDER BY rank, seq")
    b = loaded.sql(f"SELECT {cols} FROM events ORDER BY rank, seq")
    assert a.equals(b)
    assert lazy.world_size == 4 and lazy.missing_ranks == []


def test_missing_rank_file_is_reported(tiny: Path) -> None:
    (tiny / "rank-00002.parquet").unlink()
    run = open_run(tiny)
    assert run.missing_ranks == [2]
    assert any("rank 2" in w and "missing" in w for w in run.warnings)
    assert run.sql("SELECT DISTINCT rank FROM events ORDER BY rank").column(0).to_pylist() == [
        0,
        1,
        3,
    ]
    status = dict(
        run.sql("SELECT rank, status FROM ranks").to_pylist()[i].values() for i in range(4)
    )
    assert status[2] == "missing"


def test_truncated_rank_file_is_skipped_with_a_warning(tiny: Path) -> None:
    path = tiny / "rank-00001.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    run = open_run(tiny)
    assert run.missing_ranks == [1]
    assert any("rank-00001.parquet is truncated" in w for w in run.warnings)
    assert op_table(run).num_rows > 0


def test_flushed_parts_of_an_unfinished_rank_are_read(tiny: Path) -> None:
    table = pq.read_table(tiny / "rank-00003.parquet")
    (tiny / "rank-00003.parquet").unlink()
    write_parts(tiny / ".rank-00003.parts", table)
    run = open_run(tiny)
    assert run.missing_ranks == []
    assert any("rank 3 did not finish" in w for w in run.warnings)
    n = run.row("SELECT count(*) FROM events WHERE rank = 3")
    assert n is not None and n[0] == table.num_rows
    # Every column reads back as the finished file had it.
    loaded = load_run(tiny, quiet=True).events
    mine = loaded.filter(pa.compute.equal(loaded.column("rank"), 3)).sort_by("seq")
    assert mine.to_pylist() == table.sort_by("seq").to_pylist()


def test_foreign_parquet_is_a_one_line_error(tiny: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tiny / "rank-00000.parquet")
    with pytest.raises(RunFormatError, match=r"rank-00000\.parquet: not a commlens events file"):
        open_run(tiny)


def test_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunFormatError, match="no such run directory"):
        open_run(tmp_path / "nope")
    with pytest.raises(RunFormatError, match="not a commlens run"):
        open_run(tmp_path)
    (tmp_path / "rank-00000.parquet").write_text("hello")
    with pytest.raises(RunFormatError, match="not a Parquet file"):
        open_run(tmp_path)


def test_loaded_run_gives_the_same_cross_rank_figures(tiny: Path) -> None:
    from commlens.analysis import skew_table, straggler_table, utilization_summary

    lazy = open_run(tiny)
    loaded = open_run(load_run(tiny, quiet=True))
    for table in (skew_table, straggler_table, utilization_summary):
        a, b = table(lazy).to_pylist(), table(loaded).to_pylist()
        assert len(a) == len(b) > 0
        for x, y in zip(a, b, strict=True):
            assert _close(x, y)


def test_rank_file_out_of_seq_order_with_small_row_groups(tiny: Path) -> None:
    """Rows stored shuffled, in many row groups: results as for the ordered file."""
    from commlens.analysis import matched_events
    from commlens.analysis.rankpass import rank_pass

    before = open_run(tiny)
    want_groups = rank_pass(before).groups.to_pylist()
    want = matched_events(before).to_pylist()
    path = tiny / "rank-00002.parquet"
    table = pq.read_table(path)
    shuffled = table.take(pa.array(list(range(table.num_rows))[::-1]))
    pq.write_table(shuffled.replace_schema_metadata(table.schema.metadata), path, row_group_size=3)
    assert pq.ParquetFile(path).metadata.num_row_groups > 3
    after = open_run(tiny)
    assert rank_pass(after).groups.to_pylist() == want_groups
    assert matched_events(after).to_pylist() == want


def test_analyses_take_a_path_a_loaded_run_or_a_view(tiny: Path) -> None:
    view = open_run(tiny)
    want = op_table(view).to_pylist()
    for source in (tiny, str(tiny), load_run(tiny, quiet=True)):
        got = op_table(source).to_pylist()
        assert [(r["op"], r["pg_name"], r["count"]) for r in got] == [
            (r["op"], r["pg_name"], r["count"]) for r in want
        ]


def _jittered_run(tmp_path: Path) -> Path:
    """3 ranks, 4 steps: a world all-reduce, a pair all-gather, a queued async
    all-gather per step, with arrivals that differ by rank and step."""
    from commlens.trace.synthetic import ev, write_run

    events = []
    for r in range(3):
        for s in range(4):
            t = s * 10_000 + 37 * r * (s + 1)
            events.append(ev(r, "all_reduce", t, t + 900 + 50 * s, pg_ranks=[0, 1, 2], step=s))
            if r < 2:
                events.append(ev(r, "all_gather", t + 1000, t + 1400, pg="1", step=s))
            events += [
                ev(
                    r,
                    "all_gather",
                    t + 2000 + 10 * k,
                    t + 2600 + 300 * k,
                    pg="2",
                    pg_ranks=[0, 1, 2],
                    step=s,
                    is_async=True,
                    wait_us=0,
                )
                for k in range(3)
            ]
    windows = {r: [(s * 10_000, s * 10_000 + 9000) for s in range(4)] for r in range(3)}
    return write_run(tmp_path / "jitter", events, world_size=3, steps=windows)


@pytest.mark.parametrize("steps", [(1, 4), (1, 3), (2, None)])
def test_headline_in_the_pass_matches_a_pass_over_those_steps(
    tmp_path: Path, steps: tuple[int, int | None]
) -> None:
    from commlens.analysis import rank_pass, skew_table, straggler_table
    from commlens.analysis.breakdown import phase_table

    run = _jittered_run(tmp_path)
    with open_run(run) as view:
        head = rank_pass(view, match=True, headline=steps).head
    assert head is not None and head.step_range == steps
    with open_run(run, steps=steps) as view:
        alone = rank_pass(view, match=True)
    # bandwidth leaves out each rank's first call of a group's op (connection set-up):
    # in the whole run's pass that is the call in step 0, not the window's first
    first_call = {"algbw_GBps", "busbw_GBps"}
    for table in (op_table, step_table, phase_table, skew_table, straggler_table):
        a, b = table(head).to_pylist(), table(alone).to_pylist()
        assert len(a) == len(b) > 0, table.__name__
        for x, y in zip(a, b, strict=True):
            assert _close(
                {k: v for k, v in x.items() if k not in first_call},
                {k: v for k, v in y.items() if k not in first_call},
            )
    assert op_table(head).column("busbw_GBps") != op_table(alone).column("busbw_GBps")
