"""The demo's and the sweep report's link findings are worded from the measured numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from commlens.sweep.spread import (
    Spread,
    comparison_sentence,
    gain_sentence,
    link_findings,
    link_gain,
    run_spread,
    spread,
)


def _row(scheme: str, slow_s: float, fast_s: float) -> dict[str, Any]:
    return {
        "model": "gpt-tiny",
        "scheme": scheme,
        "slowest_link": "100mbit",
        "fastest_link": "unshaped",
        "slowest_step_s": slow_s,
        "fastest_step_s": fast_s,
        "speedup": slow_s / fast_s,
        "slowest_id": f"{scheme}-slow",
        "fastest_id": f"{scheme}-fast",
    }


def _band(low: float, high: float) -> Spread:
    return Spread(8, low, low, (low + high) / 2, high, high)


def test_spread_is_the_quartiles_of_the_steps() -> None:
    s = spread([0.5, 0.1, 0.2, 0.3, 0.4])
    assert s is not None and (s.steps, s.best, s.median, s.worst) == (5, 0.1, 0.3, 0.5)
    assert (s.q1, s.q3) == (0.2, 0.4) and s.band == "0.2000–0.4000"
    assert spread([]) is None and spread([1.0]) == Spread(1, 1.0, 1.0, 1.0, 1.0, 1.0)


def test_run_spread_reads_the_measured_steps_of_the_manifest(tmp_path: Path) -> None:
    steps = [{"time_s": 9.0, "warmup": True}] + [{"time_s": t, "warmup": False} for t in (1, 2, 3)]
    (tmp_path / "run.json").write_text(json.dumps({"steps_metrics": steps}))
    s = run_spread(tmp_path)
    assert s is not None and (s.steps, s.best, s.worst) == (3, 1.0, 3.0)  # warm-up left out
    assert run_spread(tmp_path / "missing") is None


def test_a_reversed_speedup_inside_the_noise_is_said_so() -> None:
    """The fresh-clone demo that printed 0.87x beside "DP gains far more"."""
    rows = [_row("dp", 0.20, 0.10), _row("tp", 0.11, 0.10), _row("pp", 0.087, 0.10)]
    spreads = {
        "dp-slow": _band(0.20, 0.22),
        "dp-fast": _band(0.10, 0.12),
        "tp-slow": _band(0.11, 0.14),
        "tp-fast": _band(0.10, 0.13),
        "pp-slow": _band(0.087, 0.12),
        "pp-fast": _band(0.10, 0.13),
    }
    lines = link_findings(rows, spreads)
    assert lines[0].startswith("dp: speedup 2.00x from the 100mbit link to the unshaped one")
    assert lines[0].endswith("a gain beyond the noise.")
    assert "tp: speedup 1.10x" in lines[1] and lines[1].endswith("within the noise.")
    assert "pp: speedup 0.87x" in lines[2] and lines[2].endswith("within the noise.")
    assert "0.0870–0.1200 s → 0.1000–0.1300 s" in lines[2]
    assert lines[3] == (
        "dp measured the largest speedup (2.00x): clearly more than tp (1.10x), pp (0.87x), "
        "as Study A found: data parallelism sends every gradient, model parallelism activations."
    )


def test_no_finding_when_the_bands_overlap_or_reverse() -> None:
    rows = [_row("dp", 0.12, 0.10), _row("pp", 0.115, 0.10)]
    spreads = {
        "dp-slow": _band(0.12, 0.13),
        "dp-fast": _band(0.10, 0.11),
        "pp-slow": _band(0.115, 0.13),
        "pp-fast": _band(0.10, 0.11),
    }
    lines = link_findings(rows, spreads)
    assert lines[-1] == (
        "dp measured the largest speedup (1.20x): within the noise of pp (1.15x): these runs "
        "do not confirm Study A's finding (a quieter machine or more steps may)."
    )
    alone = [link_gain(_row("dp", 0.11, 0.10), _band(0.11, 0.13), _band(0.10, 0.12))] * 2
    assert comparison_sentence(alone).endswith("no scheme gains clearly from the faster link.")
    slower = link_gain(_row("pp", 0.08, 0.10), _band(0.08, 0.085), _band(0.10, 0.11))
    assert slower.verdict == "loss"
    gains = [slower, link_gain(_row("dp", 0.2, 0.1), _band(0.2, 0.21), _band(0.1, 0.11))]
    assert comparison_sentence(gains).startswith("dp measured the largest speedup (2.00x): clearly")
    pp_first = [link_gain(_row("pp", 0.3, 0.1), _band(0.3, 0.31), _band(0.1, 0.11)), gains[1]]
    assert comparison_sentence(pp_first).endswith(
        "Study A found data parallelism gains the most; these runs do not."
    )
    # the demo that measured dp 4.51x, pp 2.48x, tp 0.72x on a busy machine
    demo = [
        link_gain(_row("dp", 0.0997, 0.0221), _band(0.1071, 0.1162), _band(0.0484, 0.0677)),
        link_gain(_row("pp", 0.0467, 0.0188), _band(0.0511, 0.0611), _band(0.0298, 0.0625)),
        link_gain(_row("tp", 0.0706, 0.0982), _band(0.1200, 0.1594), _band(0.1119, 0.1434)),
    ]
    assert comparison_sentence(demo) == (
        "dp measured the largest speedup (4.51x): clearly more than tp (0.72x); within the "
        "noise of pp (2.48x): Study A's finding holds here against tp (0.72x) only."
    )


def test_without_spreads_the_sentence_claims_nothing_about_noise() -> None:
    line, _, compared = link_findings([_row("dp", 0.2, 0.1), _row("tp", 0.1, 0.1)], {})
    assert line == (
        "dp: speedup 2.00x from the 100mbit link to the unshaped one "
        "(best step 0.2000 s → 0.1000 s)."
    )
    assert compared == "dp measured the largest speedup (2.00x); the others: tp (1.00x)."


def test_a_band_and_a_best_step_that_disagree_decide_nothing() -> None:
    # the gallery's tp: best step 0.88x, yet the middle half of its steps faster on the
    # faster link: neither a gain nor a loss is claimed
    row = _row("tp", 0.088, 0.100)
    mixed = link_gain(row, _band(0.120, 0.130), _band(0.100, 0.110))
    assert mixed.speedup < 1 < mixed.low  # type: ignore[operator]
    assert mixed.verdict == "mixed"
    line = gain_sentence(row, _band(0.120, 0.130), _band(0.100, 0.110))
    assert "beyond the noise" not in line and line.endswith("so these runs do not decide it.")
    assert link_gain(row, _band(0.08, 0.09), _band(0.10, 0.11)).verdict == "loss"
