"""One HTML page of each kind commlens writes, made in-process from small runs: a
report, a comparison, a sweep's report (the demo's page), a validation, a bench and a
what-if replay."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from commlens.bench.runner import BenchConfig, BenchReport
from commlens.cli.main import main
from commlens.report.bench import bench_document
from commlens.report.output import emit
from commlens.sweep.catalog import write_catalog
from commlens.trace.synthetic import ev, write_run
from tests.sweep.test_catalog import record

DATA = Path(__file__).resolve().parent.parent / "data"
KINDS = ("report", "compare", "sweep", "validate", "bench", "whatif")


def _traced_run(out: Path) -> Path:
    """Two ranks, four steps of one all-reduce and a compute gap: a run with no model
    in its manifest, so ``validate`` holds it against its own communication."""
    events: list[dict[str, Any]] = []
    steps: dict[int, list[tuple[float, float]]] = {}
    for r in (0, 1):
        steps[r] = [(s * 10_000.0, s * 10_000.0 + 9_000) for s in range(4)]
        for s in range(4):
            t = s * 10_000.0
            events.append(ev(r, "all_reduce", t + 6000, t + 8000, pg_ranks=[0, 1], step=s))
    return write_run(out, events, world_size=2, steps=steps)


def _bench() -> BenchReport:
    rows = []
    for size in (1 << 10, 1 << 14, 1 << 18, 1 << 22):
        t = 50e-6 + size * 8e-9
        busbw = size / t / 1e9
        rows.append(
            {
                "op": "all_reduce",
                "size_bytes": size,
                "count": size // 4,
                "dtype": "float32",
                "ranks": 2,
                "nodes": 1,
                "iters": 20,
                **{f"time_{k}_s": t for k in ("min", "mean", "max", "p50", "p99")},
                "algbw_GB/s": busbw,
                "busbw_GB/s": busbw,
                "busbw_Gbit/s": busbw * 8,
                "ok": True,
            }
        )
    return BenchReport(BenchConfig(ops=["all_reduce"], sizes=[r["size_bytes"] for r in rows]), rows)


def make_pages(out: Path) -> dict[str, Path]:
    """Every page kind written under ``out``; returns each kind's file."""
    out.mkdir(parents=True, exist_ok=True)
    tiny = Path(shutil.copytree(DATA / "tiny_run", out / "tiny_run"))
    other = Path(shutil.copytree(DATA / "tiny_run", out / "tiny_again"))
    pages = {kind: out / f"{kind}.html" for kind in KINDS}
    assert main(["report", str(tiny), "-o", str(pages["report"])]) == 0
    assert main(["compare", str(tiny), str(other), "-o", str(pages["compare"])]) == 0
    assert main(["whatif", str(tiny), "--net", "tcp-10g", "-o", str(pages["whatif"])]) == 0
    sweep = out / "sweep"
    (sweep / "points").mkdir(parents=True)
    (sweep / "sweep.toml").write_text('[sweep]\ntitle = "gpt-tiny under DP, TP and PP"\n')
    write_catalog(
        sweep,
        [
            record("dp", "500mbit", 0.30, {"all_reduce/dp": (8e5, 0.6)}, peak=0.48),
            record("dp", "unshaped", 0.10, {"all_reduce/dp": (8e5, 0.2)}, peak=3.0),
            record("tp", "500mbit", 0.12, {"all_reduce/tp": (1e5, 0.5)}, peak=0.3),
            record("tp", "unshaped", 0.10, {"all_reduce/tp": (1e5, 0.4)}, peak=1.0),
        ],
        ["tcp-10g"],
    )
    assert main(["report", str(sweep), "-o", str(pages["sweep"])]) == 0
    traced = _traced_run(out / "traced")
    with pages["validate"].open("w") as fh:
        from contextlib import redirect_stdout

        with redirect_stdout(fh):
            main(["validate", str(traced), "--format", "html"])
    emit(bench_document(_bench()), str(pages["bench"]), "html")
    return pages
