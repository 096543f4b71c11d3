"""Regenerate ``tests/data/tiny_run`` (checked in; a few KB) and its expected report.

    .venv/bin/python -m tests.data.make_tiny_run

4 ranks, 2 steps of 10 ms: tensor-parallel all-reduces in groups [0,1] and
[2,3] (forward and backward), two overlapping async DDP bucket all-reduces
over the world (rank 3 arrives 300 µs late), an optimizer all-gather (rank 3
100 µs late) and a send 0 -> 2. Rank 1's clock runs 5 µs ahead. Times are
exact, so every figure of the report can be checked by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from commlens.trace.synthetic import ev, write_run

HERE = Path(__file__).parent
RUN = HERE / "tiny_run"
EXPECTED = HERE / "tiny_run.report.txt"
WORLD = [0, 1, 2, 3]


def tiny_events() -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for step in range(2):
        b = step * 10_000.0
        for r in WORLD:
            tp = [0, 1] if r < 2 else [2, 3]
            pg = "1" if r < 2 else "2"
            late = 300.0 if r == 3 else 0.0
            common = {"step": step, "pg": pg, "pg_ranks": tp, "role": "tp", "size": 8192}
            events += [
                ev(
                    r,
                    "all_reduce",
                    b + 1000,
                    b + 1300,
                    phase="forward",
                    module="layers.0.attn",
                    **common,
                ),
                ev(
                    r,
                    "all_reduce",
                    b + 2000,
                    b + 2200,
                    phase="forward",
                    module="layers.0.mlp",
                    **common,
                ),
                ev(
                    r,
                    "all_reduce",
                    b + 4000,
                    b + 4300,
                    phase="backward",
                    module="layers.0.mlp",
                    **common,
                ),
            ]
            ddp = {
                "step": step,
                "pg": "0",
                "pg_ranks": WORLD,
                "role": "dp",
                "size": 1 << 20,
                "is_async": True,
                "api": "ddp_hook",
                "phase": "backward",
            }
            events += [
                ev(r, "all_reduce", b + 5000 + late, b + 7000, wait_us=0, **ddp),
                ev(r, "all_reduce", b + 6000 + late, b + 7500, wait_us=500, **ddp),
            ]
            events.append(
                ev(
                    r,
                    "all_gather",
                    b + 8000 + (100 if r == 3 else 0),
                    b + 8400,
                    pg="0",
                    pg_ranks=WORLD,
                    role="dp",
                    size=65536,
                    bytes_in=16384,
                    step=step,
                    phase="optimizer",
                )
            )
            if r == 0:
                events.append(
                    ev(
                        0,
                        "send",
                        b + 8600,
                        b + 8800,
                        pg="0",
                        pg_ranks=WORLD,
                        size=16384,
                        peer=2,
                        step=step,
                        phase="optimizer",
                    )
                )
            if r == 2:
                events.append(
                    ev(
                        2,
                        "recv",
                        b + 8550,
                        b + 8800,
                        pg="0",
                        pg_ranks=WORLD,
                        size=16384,
                        peer=0,
                        step=step,
                        phase="optimizer",
                    )
                )
    return events


def tiny_meta() -> dict[int, dict[str, Any]]:
    records = [
        {
            "step": 0,
            "time_s": 0.01,
            "loss": 4.0,
            "tokens_per_s": 20000.0,
            "tflops": 0.5,
            "warmup": True,
        },
        {
            "step": 1,
            "time_s": 0.01,
            "loss": 3.5,
            "tokens_per_s": 25600.0,
            "tflops": 0.64,
            "warmup": False,
        },
    ]
    return {r: {"steps_metrics": records} for r in WORLD}


def make(run_dir: Path = RUN) -> Path:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    return write_run(
        run_dir,
        tiny_events(),
        world_size=4,
        steps={r: [(0.0, 10_000.0), (10_000.0, 20_000.0)] for r in WORLD},
        clock_offset_ns={1: 5000},
        rank_meta=tiny_meta(),
        extra={"workload": {"model": "gpt-tiny", "scheme": "dp+tp"}},
    )


def expected_text(run_dir: str = "tiny_run") -> str:
    """The text report of the run as the test renders it (from ``tests/data``)."""
    from commlens.report.build import build_report
    from commlens.report.text import TextRenderer
    from commlens.trace.reader import open_run

    view = open_run(run_dir)
    try:
        return TextRenderer(width=100).render(build_report(view))
    finally:
        view.close()


if __name__ == "__main__":
    import os

    make()
    os.chdir(HERE)
    EXPECTED.write_text(expected_text())
    print(f"wrote {RUN} and {EXPECTED}")
