"""``commlens report`` on a generated 64-rank 3D-parallel run finds what was planted.

tp 2 x pp 2 x dp 16 on 8 nodes of 8 ranks, 3 steps (commlens.trace.synthetic):
two straggling ranks, one slow node, each node's clock 40 µs further ahead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from commlens.analysis.skew import late_nodes, late_ranks
from commlens.trace.files import format_ranks
from commlens.trace.synthetic import Planted, Spec, generate

SPEC = Spec(tp=2, pp=2, dp=16, ranks_per_node=8, steps=3)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Planted]:
    out = tmp_path_factory.mktemp("planted") / "run64"
    return out, generate(out, SPEC)


def _report(run_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "commlens", "report", str(run_dir), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_generated_layout(run: tuple[Path, Planted]) -> None:
    run_dir, planted = run
    assert planted.world_size == 64
    assert len(list(run_dir.glob("rank-*.parquet"))) == 64
    assert [len(g) for g in planted.groups["dp"]] == [16] * 4
    assert [len(g) for g in planted.groups["tp"]] == [2] * 32
    assert planted.stragglers and not set(planted.stragglers) & set(planted.slow_ranks)
    assert planted.events == 64 * 3 * (2 * (8 + 2) + 5) == 64 * 3 * SPEC.ops_per_step()


def test_json_finds_planted(run: tuple[Path, Planted]) -> None:
    run_dir, planted = run
    data = json.loads(_report(run_dir, "--format", "json"))
    late = set(planted.stragglers) | set(planted.slow_ranks)
    # by mean lateness the planted ranks come first, the stragglers above the slow node
    rows = sorted(data["stragglers"], key=lambda row: -row["mean_lateness_s"])
    ranked = [row["rank"] for row in rows]
    assert set(ranked[: len(planted.stragglers)]) == set(planted.stragglers)
    assert set(ranked[: len(late)]) == late
    # clocks were aligned: no on-time rank looks late, though nodes' clocks are 40-280 µs apart
    on_time = [r for r in data["stragglers"] if r["rank"] not in late]
    assert max(r["mean_lateness_s"] for r in on_time) < 30e-6
    headline = "\n".join(data["highlights"])
    assert format_ranks(planted.stragglers) in headline
    assert f"all of node {planted.slow_node} (ranks {format_ranks(planted.slow_ranks)})" in headline
    assert "clocks of 8 nodes were offset by up to 280.0 µs" in headline


def test_text_headline_names_them(run: tuple[Path, Planted]) -> None:
    run_dir, planted = run
    text = _report(run_dir)
    head = " ".join(text.split("\n\n")[1].split())  # the lines as wrapped, joined
    assert f"ranks {format_ranks(planted.stragglers)}; all of node {planted.slow_node}" in head
    assert "node007 +280.0 µs" in head


def test_text_ranks_as_distribution(run: tuple[Path, Planted]) -> None:
    run_dir, _ = run
    text = " ".join(_report(run_dir).split())
    rows = json.loads(_report(run_dir, "--format", "json"))["ranks"]
    shares = sorted((-r["exposed_share"], r["rank"]) for r in rows)
    lo, hi = -shares[-1][0] * 100, -shares[0][0] * 100
    worst = ", ".join(f"rank {r} ({-s * 100:.1f})" for s, r in shares[:5])
    assert f"exposed (%) over 64 ranks: min {lo:.1f}, quartiles " in text
    assert f"max {hi:.1f}; highest: {worst}" in text
    # the table itself lists the ten ranks with the highest exposed share, in that order
    table = text.split("Ranks: the 10 of 64 with the highest exposed share")[1].split(" comm (%)")[
        0
    ]
    listed = [
        int(line.split()[0])
        for line in _report(run_dir).split("Ranks: the 10")[1].split("\n\n")[0].split("\n")
        if line.strip()[:1].isdigit() and len(line.split()) == 9
    ][:10]
    assert listed == [r for _, r in shares[:10]] and table


def test_per_node_directories_merge_to_the_same_run(tmp_path: Path) -> None:
    spec = Spec(tp=2, pp=1, dp=8, ranks_per_node=4, steps=2)
    whole, nodes, merged = tmp_path / "whole", tmp_path / "nodes", tmp_path / "merged"
    generate(whole, spec)
    planted = generate(nodes, spec, per_node=True)
    dirs = sorted(nodes.iterdir())
    assert [d.name for d in dirs] == ["node000", "node001", "node002", "node003"]
    assert len(list(dirs[1].glob("rank-*.parquet"))) == 4
    subprocess.run(
        [sys.executable, "-m", "commlens", "merge", str(merged), *map(str, dirs)],
        capture_output=True,
        check=True,
    )
    a = json.loads(_report(whole, "--format", "json"))
    b = json.loads(_report(merged, "--format", "json"))
    assert a["stragglers"] == b["stragglers"] and a["ops"] == b["ops"]
    assert format_ranks(planted.stragglers) in "\n".join(b["highlights"])


def test_text_groups_by_role(run: tuple[Path, Planted]) -> None:
    run_dir, planted = run
    text = _report(run_dir, "--width", "200")
    ops = text.split("Communication by op and role (")[1].split("\n\n")[0]
    n = 1 + len(planted.groups["tp"]) + len(planted.groups["dp"]) + len(planted.groups["pp"])
    # tp: all_reduce; dp: all_reduce and all_gather; pp: send and recv
    assert ops.startswith(f"{32 + 2 * 4 + 2 * 32} op and group rows")
    rows = [" ".join(line.split()) for line in ops.splitlines()]
    assert any(r.startswith("all_reduce dp × 4 groups of 16 768 ") for r in rows)
    assert any(r.startswith("all_reduce tp × 32 groups of 2 3,072 ") for r in rows)
    assert any(r.startswith("recv pp × 32 groups of 2 ") for r in rows)
    # a straggler's tp group waits the most among the tp groups
    skew = text.split("Cross-rank arrival skew")[1].split("\n\n")[0]
    tp = next(" ".join(r.split()) for r in skew.splitlines() if "tp × 32 groups of 2" in r)
    pairs = [f"(ranks {s - s % 2}-{s - s % 2 + 1})" for s in planted.stragglers]
    assert tp.endswith(tuple(pairs))
    sizes = text.split("By op, role and message size (log2 buckets; 104 op, group and size rows")[1]
    tp_sizes = next(" ".join(r.split()) for r in sizes.splitlines() if "tp × 32 groups" in r)
    assert tp_sizes.startswith("all_reduce tp × 32 groups of 2 4.0 MiB 3,072 ")
    assert tp_sizes.endswith(tuple(pairs))  # the slowest tp group holds a straggler
    # JSON keeps a row per op and group
    data = json.loads(_report(run_dir, "--format", "json"))
    assert len({row["pg_name"] for row in data["ops"]}) == n - 1


def test_markdown_and_html_summarise_too(run: tuple[Path, Planted], tmp_path: Path) -> None:
    run_dir, _ = run
    md = _report(run_dir, "--format", "md")
    assert "dp × 4 groups of 16" in md and "exposed (%) over 64 ranks" in md
    html = tmp_path / "r.html"
    _report(run_dir, "--format", "html", "-o", str(html))
    page = html.read_text()
    assert "dp × 4 groups of 16" in page and "exposed (%) over 64 ranks" in page


def test_utilization_lists_the_busiest(run: tuple[Path, Planted]) -> None:
    run_dir, _ = run
    text = " ".join(_report(run_dir, "--width", "200").split())
    util = text.split("Link utilization (per source, the 10 busiest of more than 32")[1]
    assert "events: mean Gbit/s over 64 ranks: min " in util
    assert util.count(" rank ") >= 10 and "rank 63 " not in util.split("highest:")[0][-2000:-1]
    data = json.loads(_report(run_dir, "--format", "json"))
    assert sum(row["source"] == "events" for row in data["utilization"]) == 64


def test_a_slow_node_diluted_by_its_own_collectives_is_named(tmp_path: Path) -> None:
    # tensor-parallel groups of 8 on nodes of 8 ranks, 11 layers and 8 microbatches (the
    # 1,024-rank 20 M-event shape of benchmarks/scale.py): the slow node's ranks are late
    # only at the few collectives across nodes, their mean lateness under half the median's
    # floor; all eight together stand out
    spec = Spec(tp=8, pp=2, dp=4, ranks_per_node=8, steps=3, layers=11, microbatches=8)
    planted = generate(tmp_path / "run", spec)
    data = json.loads(_report(tmp_path / "run", "--format", "json"))
    rows = {row["rank"]: row["mean_lateness_s"] for row in data["stragglers"]}
    median = sorted(rows.values())[len(rows) // 2]
    assert all(0 < rows[r] - median < 0.5 * median for r in planted.slow_ranks)
    headline = "\n".join(data["highlights"])
    assert f"ranks {format_ranks(sorted(planted.stragglers))}" in headline
    assert f"all of node node001 (ranks {format_ranks(planted.slow_ranks)})" in headline


def test_late_nodes_needs_every_rank_of_a_node() -> None:
    # 4 nodes of 2 ranks, 1 rank alone on a fifth: node b's ranks late together, node c's
    # only one, the lone rank 8 late alone: only b is late as a node
    late_us = {0: 8.0, 1: 8.1, 2: 11.0, 3: 11.2, 4: 8.0, 5: 40.0, 6: 7.9, 7: 8.05, 8: 30.0}
    table = pa.table(
        {"rank": list(late_us), "mean_lateness_s": [v * 1e-6 for v in late_us.values()]}
    )
    node_of = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c", 6: "d", 7: "d", 8: "e"}
    assert late_nodes(table, node_of) == ["b"]
    assert set(late_ranks(table)) == {5, 8}  # b's 3 us over is under half the median
