"""``commlens run``'s summary, its per-step lines and ``compare`` quote one definition of a
run's step, and name the rank whose loss and step lines they quote (a real 2-rank run)."""

from __future__ import annotations

import re

import commlens
from commlens.analysis.compare import compare_summary
from commlens.job.spec import Job
from tests.runs import SharedRuns

LINE = re.compile(r"^step (\d+)/(\d+)  rank (\d+): loss ([\d.]+)  ([\d.]+) s  ")
SUMMARY = re.compile(  # the line as printed, wrapped or not (whitespace collapsed)
    r"(\d+) measured steps?: step ([\d.]+) s · communication ([\d.]+) s \((\d+)% of the step, "
    r"(\d+)% exposed\) · ([\d,]+) tokens/s · .* per rank · loss \(rank (\d+)\) ([\d.]+) → ([\d.]+) "
)


def test_summary_lines_and_compare_agree(shared_runs: SharedRuns) -> None:
    for scheme in ("pp", "dp"):  # pp: the loss is on the last stage, rank 1
        run = shared_runs[scheme]
        lines = run.stdout.splitlines()
        steps = [m for line in lines if (m := LINE.match(line))]
        summary = SUMMARY.search(" ".join(run.stdout.split()))
        assert summary, run.stdout
        manifest = commlens.load_run(run.path).manifest
        job = Job.from_dict(manifest["workload"])
        rank = job.loss_rank
        assert rank == (1 if scheme == "pp" else 0)
        # every line names the rank it quotes, and the summary's loss is that rank's
        assert [int(m[1]) for m in steps] == [1, 2, 3] and {int(m[3]) for m in steps} == {rank}
        assert int(summary[7]) == rank
        assert (summary[8], summary[9]) == (steps[0][4], steps[-1][4])
        # the rank's own records are what the lines print; the run-level record names it
        own = manifest["ranks"][str(rank)]["meta"]["steps_metrics"]
        assert [f"{r['loss']:.4f}" for r in own] == [m[4] for m in steps]
        assert [f"{r['time_s']:.3f}" for r in own] == [m[5] for m in steps]
        assert {r["loss_rank"] for r in manifest["steps_metrics"]} == {rank}
        assert [r["loss"] for r in manifest["steps_metrics"]] == [r["loss"] for r in own]
        # the summary's step is compare's typical step, over the same measured steps
        row = compare_summary([run.path]).to_pylist()[0]
        assert int(summary[1]) == row["steps"] == 2  # 3 steps, the warm-up left out
        assert summary[2] == f"{row['step_s']:.3f}" and summary[3] == f"{row['comm_s']:.3f}"
        assert f"{summary[4]}%" == f"{row['comm_share']:.0%}"
        assert f"{summary[5]}%" == f"{row['exposed_share']:.0%}"
        tokens = job.global_batch * job.seq_len
        assert summary[6] == f"{tokens / row['step_s']:,.0f}"
        words = " ".join(run.stdout.split())
        assert f"as `commlens compare` gives it; the lines above are rank {rank}'s" in words
