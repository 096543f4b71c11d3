"""The one op table against the nccl-tests formulas (conventions §2, §3), and its readers."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import duckdb
import pytest

import commlens.analysis
import commlens.analysis.bandwidth
import commlens.analysis.rankpass
import commlens.analysis.timeline
import commlens.bench.worker
import commlens.predict.calls
from commlens import optable as ops
from commlens.analysis.bandwidth import factor_sql
from commlens.bench.names import OPS as BENCH_OPS
from commlens.optable import OP_TRAFFIC, OPS, bus_factor, wire_factor
from commlens.predict.calls import PredictedCall

GROUP_SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 64, 1000)

# By name, as conventions §3 lists them; object variants move like their tensor op.
TWICE_SHARED = {"all_reduce"}
SHARED = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
WHOLE = {"broadcast", "reduce", "send", "recv", "sendrecv", "barrier"}


def _base(op: str) -> str:
    return op.removesuffix("_object")


def nccl_tests_factor(op: str, n: int) -> float:
    """busbw / algbw: all-reduce 2(n−1)/n; the gathers (n−1)/n; the rest 1.

    A barrier has S = 0: no factor changes its 0 bytes, and 1 keeps busbw = algbw.
    """
    base = _base(op)
    if base in TWICE_SHARED:
        return 2 * (n - 1) / n
    if base in SHARED:
        return (n - 1) / n
    assert base in WHOLE, op
    return 1.0


def study_b_factor(op: str, n: int) -> float:
    """Study B: the ring volume without its (n−1)/n; a group of one still moves nothing."""
    if _base(op) in WHOLE:
        return nccl_tests_factor(op, n)
    return nccl_tests_factor(op, n) * n / (n - 1) if n > 1 else 0.0


def test_the_table_names_every_op_and_no_other() -> None:
    assert set(OP_TRAFFIC) == set(OPS) | set(BENCH_OPS)


@pytest.mark.parametrize("op", sorted(OP_TRAFFIC))
def test_every_op_follows_the_nccl_tests_formulas(op: str) -> None:
    for n in GROUP_SIZES:
        assert bus_factor(op, n) == nccl_tests_factor(op, n), n
        assert wire_factor(op, n) == nccl_tests_factor(op, n), n
        assert wire_factor(op, n, "ring") == nccl_tests_factor(op, n), n
        assert wire_factor(op, n, "study_b") == pytest.approx(study_b_factor(op, n)), n


def test_hand_computed_values() -> None:
    assert bus_factor("all_reduce", 8) == 1.75
    assert bus_factor("all_gather", 4) == 0.75
    assert bus_factor("barrier", 4) == 1.0
    assert wire_factor("all_reduce", 4, "study_b") == 2.0
    assert wire_factor("all_reduce", 1, "study_b") == 0.0
    assert wire_factor("broadcast", 1, "study_b") == 1.0


def test_an_unknown_op_counts_its_bytes_and_an_unknown_convention_is_refused() -> None:
    assert bus_factor("all_shuffle", 4) == 1.0
    assert wire_factor("all_shuffle", 4, "study_b") == 1.0
    with pytest.raises(ValueError, match="convention"):
        wire_factor("all_reduce", 4, "tree")


def test_analysis_model_and_bench_read_the_same_table() -> None:
    assert commlens.analysis.bus_factor is ops.bus_factor
    assert commlens.analysis.wire_factor is ops.wire_factor
    assert commlens.analysis.bandwidth.bus_factor is ops.bus_factor
    assert commlens.analysis.bandwidth.OP_TRAFFIC is ops.OP_TRAFFIC
    assert commlens.analysis.rankpass.bus_factor is ops.bus_factor
    assert commlens.predict.calls.wire_factor is ops.wire_factor
    assert commlens.bench.worker.bus_factor is ops.bus_factor


def test_the_model_volumes_use_the_table() -> None:
    for op in commlens.predict.calls.OP_ORDER:
        for n in GROUP_SIZES:
            call = PredictedCall(op, "dp", tuple(range(n)), size_bytes=1000, count=3)
            assert call.wire_bytes == 3000 * wire_factor(op, n)
            assert call.wire_bytes_b == 3000 * wire_factor(op, n, "study_b")


@pytest.mark.parametrize(
    ("convention", "wire"), [("bus", "ring"), ("ring", "ring"), ("study_b", "study_b")]
)
def test_the_sql_factors_are_the_table(convention: str, wire: str) -> None:
    names = [*OP_TRAFFIC, "all_shuffle"]
    rows = [(op, n) for op in names for n in GROUP_SIZES]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (op VARCHAR, group_size INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    got = con.execute(
        f"SELECT op, group_size, {factor_sql(convention=convention)} FROM t"
    ).fetchall()
    assert len(got) == len(rows)
    for op, n, factor in got:
        assert factor == wire_factor(op, n, wire), (op, n)


def test_the_op_facts_name_known_ops() -> None:
    assert set(ops.P2P_OPS) == set(ops.SENDS) | set(ops.RECVS) <= set(OPS)
    assert {ops.RECEIVER[s] for s in ops.SENDS} == set(ops.RECVS)
    assert not set(ops.FROM_ROOT) & set(ops.TO_ROOT)
    assert ops.ROOTED <= set(OPS) and not ops.ROOTED & ops.P2P_OPS
    assert set(ops.BLOCKING) <= set(ops.TENSOR_OPS) and not set(ops.BLOCKING) & ops.ROOTED
    assert set(ops.TENSOR_TWIN) == set(ops.OBJECT_OPS)
    for obj, tensor in ops.TENSOR_TWIN.items():
        assert tensor in ops.TENSOR_OPS and OP_TRAFFIC[obj] == OP_TRAFFIC[tensor]
        assert (obj in ops.ROOTED) == (tensor in ops.ROOTED)
        assert (obj in ops.P2P_OPS) == (tensor in ops.P2P_OPS)


def test_the_backend_table() -> None:
    assert ops.backend("gloo") is ops.GLOO and ops.backend("nccl") is ops.NCCL
    assert ops.GLOO.workers == 2 and ops.NCCL.workers == 1
    assert ops.GLOO.op_as_run("reduce_scatter") == "all_reduce"
    assert ops.NCCL.op_as_run("reduce_scatter") == "reduce_scatter"
    # a backend the table does not know (mpi, a missing manifest) runs ops as NCCL does
    assert ops.backend("mpi") is ops.NCCL and ops.backend(None) is ops.NCCL


def test_every_reader_takes_the_op_facts_from_the_table() -> None:
    import commlens.analysis.expectations as expectations
    import commlens.analysis.matched.clocks as clocks
    import commlens.analysis.matched.run as model
    import commlens.capture.recorder as recorder
    import commlens.doctor.from_run as from_run
    import commlens.importers.clocks as import_clocks
    import commlens.whatif.backend as backend
    import commlens.whatif.calibrate as calibrate
    import commlens.whatif.costing as costing
    import commlens.whatif.durations as durations

    diagnose = importlib.import_module(
        "commlens.doctor.diagnose"
    )  # the package re-exports a function of that name
    for module in (recorder, commlens.analysis.rankpass, expectations, from_run):
        assert module.P2P_OPS is ops.P2P_OPS, module.__name__
    assert expectations.RECEIVER is ops.RECEIVER
    assert (model.SENDS, model.RECVS) == (ops.SENDS, ops.RECVS)
    assert diagnose.ROOTED is ops.ROOTED and from_run.ROOTED is ops.ROOTED
    assert (clocks.FROM_ROOT, clocks.TO_ROOT) == (ops.FROM_ROOT, ops.TO_ROOT)
    assert clocks.BLOCKING is ops.BLOCKING and import_clocks.BLOCKING is ops.BLOCKING
    assert costing.TENSOR_TWIN is ops.TENSOR_TWIN and calibrate.TENSOR_TWIN is ops.TENSOR_TWIN
    assert backend.GLOO is ops.GLOO
    for name in ("GLOO_WORKERS", "GLOO_AS", "OBJECT_AS_TENSOR", "STRICT", "_RECEIVES", "P2P"):
        modules = (durations, costing, clocks, expectations, from_run, commlens.analysis.timeline)
        for module in modules:
            assert not hasattr(module, name), (module.__name__, name)


SRC = Path(__file__).resolve().parent.parent / "src" / "commlens"
# Literal op sets that look like a fact of the table and are another fact.
NOT_A_TABLE_FACT = {
    # the ops ZeRO shards its gradients and parameters with (a training fact)
    ("analysis/expectations.py", frozenset({"reduce_scatter", "all_gather"})),
    # what bench's sendrecv times: one send and one receive
    ("bench/fit.py", frozenset({"send", "recv"})),
    # the order the model lists its ops in (every tensor op, in an order of its own)
    ("predict/calls.py", frozenset(ops.TENSOR_OPS)),
    # whatif's op times (being rewritten in another change): any module of whatif/
    ("whatif/", frozenset({"send", "recv"})),
}


def _table_facts() -> dict[frozenset[str], str]:
    """Every named set of op names in the table, and its tensor-op part, by name."""
    facts: dict[frozenset[str], str] = {}
    for name, value in vars(ops).items():
        if name.isupper() and isinstance(value, (tuple, frozenset, set, dict)):
            members = frozenset(value)
            if len(members) >= 2 and all(isinstance(m, str) and m in OPS for m in members):
                facts.setdefault(members, name)
                tensor = members & set(ops.TENSOR_OPS)
                if len(tensor) >= 2:
                    facts.setdefault(frozenset(tensor), name)
    return facts


def test_no_module_spells_out_an_op_fact_of_the_table() -> None:
    """A set of op names the table names (p2p, rooted, equal sizes, S from the output,
    counted by share, ...) is taken from the table, not written again."""
    facts = _table_facts()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "optable.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.Set, ast.Tuple, ast.List)):
                continue
            names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            members = frozenset(n for n in names if isinstance(n, str))
            if len(names) == len(node.elts) == len(members) and members in facts:
                allowed = {(rel, members), (rel.split("/")[0] + "/", members)}
                if not allowed & NOT_A_TABLE_FACT:
                    found.append(f"{rel}:{node.lineno}: {sorted(members)} is {facts[members]}")
    assert not found, "\n".join(found)
    assert frozenset({"send", "recv"}) in facts and frozenset({"all_gather", "gather"}) in facts
