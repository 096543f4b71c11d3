"""A run larger than a chunk replayed a chunk of steps at a time: the whole replay's
answers, the run never held whole."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from commlens.errors import RunFormatError, UsageError
from commlens.report.whatif import build_whatif_document
from commlens.trace.synthetic import Spec, generate
from commlens.whatif import chunked, study
from commlens.whatif.study import Study

SHAPE = Spec(tp=2, pp=2, dp=2, ranks_per_node=4, microbatches=2, layers=1, steps=24)
"""8 ranks on 2 emulated nodes (the second one slow, its clock 40 us ahead), two
stragglers: every kind of op, queue and clock correction the replay holds."""
NETS = "tcp-10g,200mbit"
CHUNK = 600
"""Events a chunk in these tests (136 a step): 24 steps in 6 chunks of 4 steps."""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("chunked") / "run"
    generate(out, SHAPE)
    return out


@pytest.fixture(scope="module")
def whole(run: Path) -> Study:
    return study.run_study(run, NETS)


def chunked_study(run: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> Study:
    with monkeypatch.context() as m:
        m.setattr(chunked, "CHUNK_EVENTS", CHUNK)
        return study.run_study(run, NETS, **kwargs)  # type: ignore[arg-type]


def test_a_run_larger_than_a_chunk_gives_the_whole_replays_answers(
    run: Path, whole: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = chunked_study(run, monkeypatch)
    assert whole.chunks == 1 and parts.chunks == 6  # step 0 is not kept: its chunk is not
    assert parts.event_count == whole.trace.events == SHAPE.events_per_step() * 24
    assert parts.clock_shifts == whole.clock_shifts
    assert parts.check.max_step_error == pytest.approx(whole.check.max_step_error, abs=1e-3)
    mine = [parts.captured, parts.own_link, *parts.answers]
    theirs = [whole.captured, whole.own_link, *whole.answers]
    for got, want in zip(mine, theirs, strict=True):
        assert got is not None and want is not None
        assert got.name == want.name
        f, g = got.figures, want.figures
        assert f.steps == g.steps == list(range(1, 24))
        # what was called is counted, not modelled: the same to the byte
        assert [(o.op, o.role, o.calls, o.bytes) for o in f.ops] == [
            (o.op, o.role, o.calls, o.bytes) for o in g.ops
        ]
        # each chunk starts where the capture had its ranks, one step before the steps it
        # counts: every step within 1% of the whole replay's (measured: 0.57% at most),
        # the median within 0.1% (1e-7). Without the warm-up step, steps 3.8-7.5% off,
        # communication 0.8-2.0%
        assert np.array(f.step_s) == pytest.approx(np.array(g.step_s), rel=0.01)
        assert f.median_step_s == pytest.approx(g.median_step_s, rel=0.001)
        assert f.comm_s == pytest.approx(g.comm_s, rel=0.005)
        # the last step's critical path: the last chunk's replay of it
        assert [(c.op, c.role) for c in f.critical] == [(c.op, c.role) for c in g.critical]
        assert [c.seconds for c in f.critical] == pytest.approx(
            [c.seconds for c in g.critical], rel=0.05, abs=1e-6
        )


def test_a_chunked_replay_holds_a_chunk_and_its_warm_up_step(run: Path) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(chunked, "CHUNK_EVENTS", CHUNK)
        with chunked.chunked_run(run) as (_, spilled):
            assert spilled is not None and spilled.width == 4
            got = list(chunked.chunk_traces(spilled, list(range(1, 24))))
    per_step = SHAPE.events_per_step()
    assert [keep for _, keep in got] == [
        [1, 2, 3],
        *[list(range(s, s + 4)) for s in (4, 8, 12, 16, 20)],
    ]
    for (trace, keep), first in zip(got, (0, 3, 7, 11, 15, 19), strict=True):
        steps = sorted(set(trace.step.tolist()))
        assert steps == [first, *keep]
        assert trace.events == per_step * len(steps)
        assert sorted(set(trace.step_index.tolist())) == steps
        assert (np.diff(trace.rank.astype(np.int64)) >= 0).all()  # by rank, in issue order
        for r in range(SHAPE.world_size):
            mine = trace.rank == r
            assert (np.diff(trace.t_issue[mine]) >= 0).all()


def test_a_chunked_report_counts_the_runs_events(
    run: Path, whole: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = chunked_study(run, monkeypatch)
    data = build_whatif_document(parts).data
    assert data["events"] == whole.trace.events
    assert any("chunk" in line for line in parts.assumptions)
    assert not any("chunk" in line for line in whole.assumptions)


def test_a_step_range_replays_only_the_chunks_that_hold_it(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = chunked_study(run, monkeypatch, steps=(9, 14))
    assert parts.chunks == 2 and parts.captured.figures.steps == list(range(9, 14))


def test_a_chunked_run_missing_a_rank_is_refused_and_its_spill_removed(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    (broken / "rank-00003.parquet").unlink()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    with pytest.raises(RunFormatError, match=r"rank\(s\) 3 missing or unreadable"):
        chunked_study(broken, monkeypatch)
    assert not list((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize(
    "asked",
    [
        {"op_times": "model"},
        {"op_times": "delta", "captured_net": "loopback"},
        {"dp": 4},
        {"nodes": 2},
        {"without": ("link-bucket",)},
    ],
    ids=["model", "delta", "dp 4", "2 nodes", "no bucket"],
)
def test_every_question_replayed_by_chunks_gives_the_whole_replays_medians(
    run: Path, asked: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = study.run_study(run, NETS, **asked)  # type: ignore[arg-type]
    parts = chunked_study(run, monkeypatch, **asked)
    assert parts.chunks == 6 and parts.placement == whole.placement
    mine, theirs = [parts.captured, *parts.answers], [whole.captured, *whole.answers]
    for got, want in zip(mine, theirs, strict=True):
        assert got.figures.median_step_s == pytest.approx(want.figures.median_step_s, rel=1e-3)


def test_a_run_compared_with_a_prediction_is_replayed_by_chunks_too(
    run: Path, whole: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(chunked, "CHUNK_EVENTS", CHUNK)
        trace, check, captured = study.replay_captured(run, None)
    assert trace.events == 0 and trace.name == whole.trace.name  # the run, not held
    assert check.max_step_error == pytest.approx(whole.check.max_step_error, abs=1e-3)
    assert captured.figures.steps == whole.captured.figures.steps
    assert captured.figures.median_step_s == pytest.approx(
        whole.captured.figures.median_step_s, rel=1e-3
    )


def test_a_rank_whose_clock_breaks_causality_is_moved_as_the_whole_run_moves_it(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rank 5's recorded offset 3 ms off: its ops end before their peers issued them. The
    # chunks find it, then take the whole run's shifts and replay every chunk again
    skewed = tmp_path / "skewed"
    shutil.copytree(run, skewed)
    meta = skewed / "rank-00005.json"
    rank = json.loads(meta.read_text())
    rank["clock"]["offset_ns"] += 3_000_000
    meta.write_text(json.dumps(rank))
    whole = study.run_study(skewed, NETS)
    assert whole.clock_shifts == {5: -3_000_000}
    parts = chunked_study(skewed, monkeypatch)
    assert parts.chunks == 6 and parts.clock_shifts == whole.clock_shifts
    for got, want in zip(
        [parts.captured, *parts.answers], [whole.captured, *whole.answers], strict=True
    ):
        assert got.figures.median_step_s == pytest.approx(want.figures.median_step_s, rel=1e-3)


def test_a_question_the_run_cannot_answer_is_refused_before_any_chunk_is_replayed(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def replayed(*args: object, **kwargs: object) -> None:
        raise AssertionError("a chunk was replayed")

    monkeypatch.setattr(study, "_study", replayed)
    with pytest.raises(UsageError, match="--nodes 3 must be a positive divisor of the run's 8"):
        chunked_study(run, monkeypatch, nodes=3)
