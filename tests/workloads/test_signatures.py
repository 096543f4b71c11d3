"""Communication signatures of each scheme, from captured runs (conventions §2).

One spawn of two ranks trains gpt-tiny (L = 2, h = 64, V = 512; b = 2,
s = 16, fp32) under each scheme with capture on, as ``commlens run``'s
worker does; every test reads step 1 (after one warm-up step) of one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

import commlens
from commlens.job.models import get_preset, param_count
from commlens.job.parallel import resolve_dims
from commlens.job.spec import Job, RunSettings

from .jobs import capture_jobs
from .ranks import run_ranks

GPT = get_preset("gpt-tiny")
L, H, V = GPT.layers, GPT.hidden, GPT.vocab
B, S, K = 2, 16, 2
ACT = B * S * H * 4  # one activation message b·s·h·βa
PARAM_BYTES = param_count(GPT) * 4


def make(scheme: str, **kw: Any) -> Job:
    return Job(
        GPT,
        scheme,
        resolve_dims(scheme, 2),
        seq_len=S,
        micro_batch=B,
        run=RunSettings(steps=2, warmup_steps=1),
        **kw,
    )


RUNS = {
    "tp": make("tp"),
    "tp-sp": make("tp", sequence_parallel=True),
    "pp": make("pp", microbatches=K),
    "zero2": make("zero2"),
    "zero3": make("zero3"),
    "zero1": make("zero1"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, duckdb.DuckDBPyConnection]:
    root = tmp_path_factory.mktemp("signatures")
    jobs = [(wcfg.to_dict(), str(root / name)) for name, wcfg in RUNS.items()]
    run_ranks(capture_jobs, 2, jobs)
    out = {}
    for name in RUNS:
        con = duckdb.connect()
        con.register("events", commlens.load_run(Path(root / name)).events)
        out[name] = con
    return out


def per_rank(con: duckdb.DuckDBPyConnection, where: str) -> list[tuple[Any, ...]]:
    return con.sql(
        f"SELECT rank, count(*), coalesce(sum(size_bytes), 0) FROM events "
        f"WHERE step = 1 AND {where} GROUP BY rank ORDER BY rank"
    ).fetchall()


def test_tp_four_all_reduces_per_layer_of_b_s_h(runs: dict[str, Any]) -> None:
    con = runs["tp"]
    assert per_rank(con, "role <> 'tp'") == []
    for phase in ("forward", "backward"):
        # 2 per layer, plus the embedding (forward) or the LM-head input (backward)
        got = per_rank(con, f"op = 'all_reduce' AND size_bytes = {ACT} AND phase = '{phase}'")
        assert got == [(r, 2 * L + 1, (2 * L + 1) * ACT) for r in (0, 1)]
    # the vocab-parallel loss: max, target logit and sum of exponentials, one float per token
    assert per_rank(con, f"op = 'all_reduce' AND size_bytes = {B * S * 4}") == [
        (r, 3, 3 * B * S * 4) for r in (0, 1)
    ]
    assert per_rank(con, "op <> 'all_reduce'") == []


def test_tp_sequence_parallel_gathers_and_scatters(runs: dict[str, Any]) -> None:
    con = runs["tp-sp"]
    for op in ("all_gather", "reduce_scatter"):
        assert per_rank(con, f"op = '{op}' AND size_bytes = {ACT}") == [
            (r, 4 * L + 2, (4 * L + 2) * ACT) for r in (0, 1)
        ]
    # the loss scalars and one all-reduce of the norms' partial gradients
    assert [n for _, n, _ in per_rank(con, "op = 'all_reduce'")] == [4, 4]


def test_pp_sends_activations_and_all_reduces_the_embedding(runs: dict[str, Any]) -> None:
    con = runs["pp"]
    for op in ("send", "recv"):
        rows = con.sql(
            f"SELECT rank, peer, count(*), sum(size_bytes) FROM events WHERE step = 1 "
            f"AND op = '{op}' AND role = 'pp' GROUP BY ALL ORDER BY rank"
        ).fetchall()
        assert rows == [(0, 1, K, K * ACT), (1, 0, K, K * ACT)]
    embed = con.sql(
        "SELECT rank, pg_ranks, role, size_bytes FROM events WHERE step = 1 AND op = 'all_reduce'"
    ).fetchall()
    assert sorted(embed) == [(0, [0, 1], "pp", V * H * 4), (1, [0, 1], "pp", V * H * 4)]


@pytest.mark.parametrize(("scheme", "gathers"), [("zero3", 2), ("zero2", 1)])
def test_zero_gathers_and_scatters_the_parameters(
    scheme: str, gathers: int, runs: dict[str, Any]
) -> None:
    # zero3 gathers before forward and again before backward; zero2 keeps them for backward
    con = runs[scheme]
    for op, times in (("all_gather", gathers), ("reduce_scatter", 1)):
        rows = per_rank(con, f"op = '{op}' AND role = 'dp'")
        assert [r for r, _, _ in rows] == [0, 1]
        for rank, _, nbytes in rows:
            assert nbytes == pytest.approx(times * PARAM_BYTES, rel=0.05), (op, rank)
    assert per_rank(con, "op NOT IN ('all_gather', 'reduce_scatter')") == []


def test_zero1_all_reduces_then_broadcasts_the_parameters(runs: dict[str, Any]) -> None:
    # ZeroRedundancyOptimizer: DDP's full all-reduce, then each owner broadcasts its parameters
    con = runs["zero1"]
    assert per_rank(con, "op = 'all_reduce'") == [(0, 1, PARAM_BYTES), (1, 1, PARAM_BYTES)]
    broadcast = per_rank(con, "op = 'broadcast' AND phase = 'optimizer'")
    assert [nbytes for _, _, nbytes in broadcast] == [PARAM_BYTES, PARAM_BYTES]
