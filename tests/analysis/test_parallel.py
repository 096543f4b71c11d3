"""Per-rank work over processes: chunks in rank order, the same pass whatever the workers."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from commlens.analysis import parallel, rankpass
from commlens.analysis.parallel import chunks, map_chunks
from commlens.analysis.rankpass import RankPass, rank_pass
from commlens.trace.synthetic import Spec, generate


def test_chunks_are_contiguous_near_equal_and_in_order() -> None:
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert chunks([1, 2], 5) == [[1], [2]]
    assert chunks([], 2) == [[]]


def test_one_worker_runs_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    assert map_chunks(lambda c: (os.getpid(), sum(c)), range(10)) == [(os.getpid(), 45)]
    monkeypatch.setenv(parallel.JOBS_ENV, "two")
    with pytest.raises(ValueError, match="COMMLENS_JOBS"):
        parallel.jobs()


def _tables(rp: RankPass) -> dict[str, pa.Table | None]:
    head = rp.head
    assert rp.matched is not None and head is not None and head.matched is not None
    return {
        "agg": rp.agg,
        "steps": rp.steps,
        "groups": rp.groups,
        "util": rp.util,
        "inter": rp.inter,
        "quantiles": rp.quantiles,
        "head_agg": head.agg,
        **{f"triple_{k}": pa.array(v) for k, v in rp.matched.per_triple.items()},
        **{f"rank_{k}": pa.array(v) for k, v in rp.matched.per_rank.items()},
        **{f"step_{k}": pa.array(v) for k, v in rp.matched.per_step.items()},
        **{f"head_{k}": pa.array(v) for k, v in head.matched.per_triple.items()},
        "triples": pa.array([list(t) for t in rp.matched.triples]),
    }


@pytest.mark.e2e
def test_the_pass_is_the_same_over_three_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 32-rank run on 4 nodes, its pass in one process and over three forked workers
    (chunks of 11, 11 and 10 ranks, each coding names in its own order): every table and
    every matched sum is equal, bit for bit."""
    run = tmp_path / "run"
    generate(run, Spec(tp=2, pp=2, dp=8, steps=4))

    def made(jobs: str) -> dict[str, pa.Table | None]:
        monkeypatch.setenv(parallel.JOBS_ENV, jobs)
        monkeypatch.setattr(rankpass, "RANKS_A_WORKER", 8)
        assert parallel.workers(32, rankpass.RANKS_A_WORKER) == int(jobs)
        rp = rank_pass(run, util_bins=40, match=True, quantiles=True, nic=True, headline=(1, 4))
        return _tables(rp)

    one, three = made("1"), made("3")
    assert one["inter"] is not None and one["inter"].num_rows
    for name, table in one.items():
        assert table is not None and three[name] is not None, name
        assert table.equals(three[name]), name
