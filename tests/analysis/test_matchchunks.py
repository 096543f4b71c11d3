"""Matching a chunk of steps at a time gives the whole run's answer, to the last bit.

The latency percentiles too, their values written to disk a key at a time.

A generated run with a straggler and a slow node planted and one rank's clock
set 2 ms wrong, read by the rank pass and the clock check once whole (one
chunk) and once in chunks of one step (``CHUNK_EVENTS`` lowered); as generated,
with every rank's first step made set-up ops (step -1, a chunk of their own),
with one rank's collective moved into the next step (an instance across two
chunks: the whole run is matched instead), and with no step marked at all.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.analysis import matchchunks, parallel, rankpass, spill
from commlens.analysis.matched import run as matched_run
from commlens.analysis.rankpass import rank_pass
from commlens.analysis.skew import skew_by_step, skew_table, straggler_table
from commlens.trace.reader import open_run
from commlens.trace.synthetic import Planted, Spec, generate

SPEC = Spec(tp=2, pp=2, dp=4, ranks_per_node=4, steps=6, microbatches=2, layers=1)
WRONG_CLOCK = 2_000_000
"""ns rank 9's recorded clock offset is off by: its ops end before their peers issued."""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Planted]:
    run = tmp_path_factory.mktemp("chunks") / "run"
    planted = generate(run, SPEC)
    meta = run / "rank-00009.json"
    data = json.loads(meta.read_text())
    data["clock"]["offset_ns"] -= WRONG_CLOCK
    meta.write_text(json.dumps(data))
    return run, planted


def _restep(run: Path, rank: int, change: Any) -> None:
    """Rewrite ``rank``'s step column with ``change(step, op) -> step``."""
    path = run / f"rank-{rank:05d}.parquet"
    table = pq.read_table(path)
    step = table.column("step").to_numpy(zero_copy_only=False)
    op = np.array(table.column("op").to_pylist(), dtype=object)
    new = change(step.copy(), op)
    field = table.schema.field("step")
    table = table.set_column(table.schema.get_field_index("step"), field, pa.array(new, field.type))
    pq.write_table(table, path)


def _variant(run: Path, where: Path, kind: str) -> Path:
    shutil.copytree(run, where)
    ranks = range(SPEC.tp * SPEC.pp * SPEC.dp)
    if kind == "set-up":  # every rank's step 0 made set-up ops
        for r in ranks:
            _restep(where, r, lambda s, _op: np.where(s == 0, -1, s))
    elif kind == "across":  # rank 3's last collective of step 1 counted in step 2
        _restep(where, 3, _moved)
    elif kind == "unmarked":
        for r in ranks:
            _restep(where, r, lambda s, _op: np.full(s.size, None))
    return where


def _moved(step: np.ndarray, op: np.ndarray) -> np.ndarray:
    coll = np.flatnonzero((step == 1) & ~np.isin(op, ["send", "recv"]))
    step[coll[-1]] = 2
    return step


def _answers(run: Path) -> dict[str, Any]:
    with open_run(run) as view:
        rp = rank_pass(view, match=True, quantiles=True, headline=(1, None))
        shifts = dict(view.shifts or {})
    assert rp.head is not None and rp.quantiles is not None
    return {
        "latency percentiles": rp.quantiles.to_pylist(),
        "shifts": shifts,
        "skew": skew_table(rp).to_pylist(),
        "stragglers": straggler_table(rp).to_pylist(),
        "by_step": skew_by_step(rp).to_pylist(),
        "head skew": skew_table(rp.head).to_pylist(),
        "head stragglers": straggler_table(rp.head).to_pylist(),
        "instances": [getattr(rp.matched.inst, f).tolist() for f in ("first", "last", "ready")]
        if rp.matched is not None
        else None,
    }


@pytest.mark.parametrize("kind", ["as generated", "set-up", "across", "unmarked"])
def test_matching_in_chunks_of_steps_gives_the_whole_runs_answer(
    generated: tuple[Path, Planted],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    run = _variant(generated[0], tmp_path / "run", kind)
    whole = _answers(run)
    assert whole["shifts"] and abs(whole["shifts"][9]) >= WRONG_CLOCK // 2
    assert whole["stragglers"][0]["rank"] in generated[1].stragglers

    filled, fell_back = [], []
    real_fill, real_whole = matchchunks._fill, matchchunks._whole
    monkeypatch.setattr(spill, "CHUNK_EVENTS", 200)  # about one step a chunk
    monkeypatch.setattr(matchchunks, "_fill", lambda *a: filled.append(1) or real_fill(*a))
    monkeypatch.setattr(matchchunks, "_whole", lambda *a: fell_back.append(1) or real_whole(*a))
    chunked = _answers(run)
    assert chunked == whole
    assert (len(fell_back) == 1) == (kind == "across")
    assert len(filled) >= (1 if kind == "unmarked" else 2)


@pytest.mark.e2e  # forks the rank pass's workers
def test_chunks_over_worker_processes_give_the_same_answer(
    generated: tuple[Path, Planted], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = generated[0]
    whole = _answers(run)
    monkeypatch.setattr(spill, "CHUNK_EVENTS", 200)
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    monkeypatch.setattr(rankpass, "RANKS_A_WORKER", 4)
    assert parallel.workers(16, rankpass.RANKS_A_WORKER) == 3
    assert _answers(run) == whole


def test_the_clock_check_of_a_run_across_chunks_is_the_whole_runs(
    generated: tuple[Path, Planted], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _variant(generated[0], tmp_path / "run", "across")
    with open_run(run) as view:
        whole = matched_run._run_shifts(view)
    monkeypatch.setattr(spill, "CHUNK_EVENTS", 200)
    chunked = []
    real = matched_run.chunked_shifts
    monkeypatch.setattr(
        matched_run, "chunked_shifts", lambda *a: chunked.append(real(*a)) or chunked[-1]
    )
    with open_run(run) as view:
        assert matched_run._run_shifts(view).tolist() == whole.tolist()
    assert chunked == [None]  # the chunks could not be matched alone: matched whole


@pytest.mark.parametrize("command", ["report", "compare", "doctor"])
@pytest.mark.parametrize("room", ["no temporary folder", "folder not writable"])
def test_a_temporary_folder_without_room_is_one_error_line(
    generated: tuple[Path, Planted],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    room: str,
) -> None:
    from commlens.cli.main import main

    monkeypatch.setattr(spill, "CHUNK_EVENTS", 200)
    if room == "no temporary folder":
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    else:  # the spill's folder is a file: its files cannot be made
        (tmp_path / "file").write_text("")
        monkeypatch.setattr(spill, "make_temp_dir", lambda kind: tmp_path / "file")
    run = str(generated[0])
    argv = [command, run, *([run] if command == "compare" else []), "--format", "json"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert not out
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "TMPDIR" in lines[0] and "Traceback" not in err
