"""Shares are parts of their whole: a step's communication is cut to the step's window.

The job: rank 1, a pipeline's second stage, posts a blocking receive for its
input after its optimizer step and before its next forward, and rank 0 sends
it only after 60 ms of other work. The receive is the next step's op (the
optimizer step ended the last one), but the step's window opens at the
forward: 60 ms of the op lie before a window of a few ms. Cut to the window,
the step's communication is what the window holds of it; uncut it was 60 ms
against a 5 ms step (``report``: over 1000%; ``whatif``: the same).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.distributed as dist
from torch import nn

import commlens
from commlens.analysis import open_run, rank_summary, step_summary, step_table
from commlens.cli.main import main
from commlens.report.build import build_report
from commlens.report.document import Column, Section
from tests.distributed import run_ranks

_STEPS = 2
_SENDER_WORK_S = 0.06


def _job(rank: int, world: int, out: str) -> None:
    torch.manual_seed(rank)
    stage = nn.Linear(64, 64)
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    with commlens.capture(out):
        dist.init_process_group("gloo")
        x = torch.zeros(8, 64)
        for _ in range(_STEPS):
            if rank == 0:
                time.sleep(_SENDER_WORK_S)  # the first stage's work before it sends
                dist.send(torch.randn(8, 64), dst=1)
            else:
                dist.recv(x, src=0)  # posted before the forward: before the window
            loss = stage(x).square().mean()
            loss.backward()
            dist.all_reduce(torch.ones(4))
            opt.step()
            opt.zero_grad()
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def early_recv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shares") / "run"
    run_ranks(_job, 2, str(out))
    return out


def _clipped_union(run: Any, rank: int, step: int, cut: bool = True) -> tuple[float, float]:
    """(union of the step's op intervals inside its window (anywhere, unless ``cut``),
    window length), brute force."""
    start, end = (
        run.sql(f"SELECT t_start_ns, t_end_ns FROM steps WHERE rank = {rank} AND step = {step}")
        .to_pylist()[0]
        .values()
    )
    ops = run.sql(
        f"SELECT t_issue_ns, t_end_ns FROM events WHERE rank = {rank} AND step = {step}"
    ).to_pylist()
    covered: list[tuple[int, int]] = []
    for op in sorted(ops, key=lambda o: o["t_issue_ns"]):
        a, b = op["t_issue_ns"], op["t_end_ns"]
        if cut:
            a, b = max(a, start), min(b, end)
        if b <= a:
            continue
        if covered and a <= covered[-1][1]:
            covered[-1] = (covered[-1][0], max(covered[-1][1], b))
        else:
            covered.append((a, b))
    return sum(b - a for a, b in covered) / 1e9, (end - start) / 1e9


def test_the_steps_communication_is_cut_to_its_window(early_recv_run: Path) -> None:
    with open_run(early_recv_run) as run:
        outside = (
            run.sql(
                "SELECT count(*) FROM events e JOIN steps s USING (rank, step) "
                "WHERE e.rank = 1 AND e.op = 'recv' AND e.t_issue_ns < s.t_start_ns - 30e6"
            )
            .column(0)[0]
            .as_py()
        )
        assert outside >= 1  # the job does what it says: a receive starts before its window
        per_rank = step_table(run)
        uncut = [
            _clipped_union(run, r["rank"], r["step"], cut=False)
            for r in per_rank.to_pylist()
            if r["step_source"] == "manifest"
        ]
        assert max(comm / window for comm, window in uncut) > 1.5  # uncut: over 150%
        for row in per_rank.to_pylist():
            if row["step_source"] != "manifest":
                continue
            comm, window = _clipped_union(run, row["rank"], row["step"])
            assert row["comm_s"] == pytest.approx(comm, abs=1e-9)
            assert row["step_s"] == pytest.approx(window, abs=1e-9)
            assert 0.0 <= row["comm_share"] <= 1.0
            assert 0.0 <= row["exposed_s"] <= row["comm_s"] + 1e-12
        for table in (step_summary(per_rank), rank_summary(per_rank)):
            shares = np.array(table.column("comm_share").to_pylist() or [0.0])
            assert (shares <= 1.0).all(), table.to_pylist()
        doc = build_report(run)  # its sections check every share (see test below)
    headline = doc.highlights[0]
    share = float(headline.split("covers ")[1].split("%")[0])
    assert 0.0 < share <= 100.0, headline


def test_whatif_shares_stay_within_the_step(early_recv_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "whatif.json"
    code = main(["whatif", str(early_recv_run), "--net", "200mbit,loopback", "-o", str(out)])
    assert code == 0
    answer = json.loads(out.read_text())
    figures = [answer["captured"], *answer["networks"]]
    assert len(figures) == 3
    for f in figures:
        assert 0.0 < f["comm_share"] <= 1.0, f
        assert f["exposed_s"] <= f["comm_s"] + 1e-12


@pytest.mark.parametrize("value", [1.173, -0.01, float("inf")])
def test_a_share_outside_0_to_100_percent_fails_loudly(value: float) -> None:
    table = pa.table({"share": [0.5, value]})
    with pytest.raises(AssertionError, match="between 0% and 100%"):
        Section("x", "x", table, (Column("share", "comm (%)", "pct"),))
    with pytest.raises(AssertionError, match="between 0% and 100%"):
        Section("x", "x", table, (Column("share", "share of step", "{:.1%}"),))
    Section("x", "x", table, (Column("share", "error", "{:+.1%}"),))  # a difference, no share
