"""How much a point's step time varies, and what a difference between links is worth.

On a shared machine every step is disturbed a little differently, so two points
differ by chance as well as by their link. A point's :class:`Spread` is over
its measured steps (after warm-up; each step's time is the slowest rank's, as
the run's manifest records it); its middle half (the interquartile range) is
the noise band. A speedup from the slowest link to the fastest is the ratio
of the best steps (other work only ever adds time), and its band runs from
the slow point's first quartile over the fast one's third to the slow point's
third quartile over the fast one's first. Only a band wholly above 1 is a
gain, one wholly below 1 a loss; anything else is within the noise, and the
sentences here say so instead of the finding a study expected.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commlens.safefile import META_LIMIT, read_json
from commlens.sweep.catalog import point_dir
from commlens.trace.layout import MANIFEST


@dataclass(frozen=True)
class Spread:
    """A point's measured step times (s): how many, best, quartiles, worst."""

    steps: int
    best: float
    q1: float
    median: float
    q3: float
    worst: float

    @property
    def band(self) -> str:
        """The middle half of the steps, as shown: '0.0812–0.0905'."""
        return f"{self.q1:.4f}–{self.q3:.4f}"


def spread(times: Sequence[float]) -> Spread | None:
    """The spread of ``times`` (None without any)."""
    if not times:
        return None
    values = sorted(float(t) for t in times)
    if len(values) == 1:
        q1 = median = q3 = values[0]
    else:
        q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(len(values), values[0], q1, median, q3, values[-1])


def run_spread(run_dir: Path) -> Spread | None:
    """The spread of a run's measured steps, from its manifest (None if it has none)."""
    try:
        data = read_json(run_dir / MANIFEST, limit=META_LIMIT, follow=False)
        records = data.get("steps_metrics") or []
        measured = [r for r in records if not r.get("warmup")] or records
        return spread([float(r["time_s"]) for r in measured])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


@dataclass(frozen=True)
class LinkGain:
    """One scheme's speedup from the slowest link to the fastest, with its noise band."""

    scheme: str
    speedup: float
    low: float | None
    """The band's ends (None when a spread is unknown)."""
    high: float | None

    @property
    def verdict(self) -> str:
        """'gain', 'loss' or 'noise' ('' when the band is unknown); 'mixed' when the
        middle half of the steps and the best steps point opposite ways (the band says
        faster while the best step says slower, or the reverse): no verdict either way."""
        if self.low is None or self.high is None:
            return ""
        if self.low > 1:
            return "gain" if self.speedup >= 1 else "mixed"
        if self.high < 1:
            return "loss" if self.speedup <= 1 else "mixed"
        return "noise"


def link_gain(row: Mapping[str, Any], slow: Spread | None, fast: Spread | None) -> LinkGain:
    """The gain of one row of :func:`commlens.sweep.findings.link_speedup`."""
    if slow is None or fast is None or not fast.q1 or not fast.q3:
        return LinkGain(row["scheme"], float(row["speedup"]), None, None)
    return LinkGain(row["scheme"], float(row["speedup"]), slow.q1 / fast.q3, slow.q3 / fast.q1)


def gain_sentence(
    row: Mapping[str, Any], slow: Spread | None, fast: Spread | None, model: bool = False
) -> str:
    """What one scheme's link speedup says, in the measured numbers (``model``: named
    with its model, when a sweep has several)."""
    gain = link_gain(row, slow, fast)
    who = f"{row['model']} {row['scheme']}" if model else row["scheme"]
    head = (
        f"{who}: speedup {gain.speedup:.2f}x from the {row['slowest_link']} link to "
        f"the {row['fastest_link']} one (best step {row['slowest_step_s']:.4f} s → "
        f"{row['fastest_step_s']:.4f} s"
    )
    if slow is None or fast is None:
        return head + ")."
    band = f"; middle half of the steps {slow.band} s → {fast.band} s"
    verdict = {
        "gain": "a gain beyond the noise",
        "loss": "slower on the faster link, beyond the noise: not explained by the link's "
        "rate, and not measured here",
        "noise": "the two overlap, so the difference is within the noise",
        "mixed": "the middle half of the steps and the best steps disagree on which link is "
        "faster, so these runs do not decide it",
    }[gain.verdict]
    return f"{head}{band}): {verdict}."


DATA_PARALLEL = ("dp", "zero1", "zero2", "zero3")


def _apart(top: LinkGain, other: LinkGain) -> bool:
    """Whether ``top``'s band lies wholly above ``other``'s."""
    return top.low is not None and other.high is not None and top.low > other.high


def _listed(gains: Sequence[LinkGain]) -> str:
    return ", ".join(f"{g.scheme} ({g.speedup:.2f}x)" for g in gains)


def comparison_sentence(gains: Sequence[LinkGain]) -> str:
    """Which scheme the faster link helps most, and from which others the bands tell it
    apart; Study A's finding (data parallelism gains far more than model parallelism)
    is named only as far as these numbers show it."""
    if len(gains) < 2:
        return ""
    ranked = sorted(gains, key=lambda g: g.speedup, reverse=True)
    top, rest = ranked[0], ranked[1:]
    head = f"{top.scheme} measured the largest speedup ({top.speedup:.2f}x)"
    if top.verdict == "":
        return f"{head}; the others: {_listed(rest)}."
    if top.verdict != "gain":
        return f"{head}, within the noise itself: no scheme gains clearly from the faster link."
    clear = [g for g in rest if _apart(top, g)]
    unclear = [g for g in rest if not _apart(top, g)]
    parts = []
    if clear:
        parts.append(f"clearly more than {_listed(clear)}")
    if unclear:
        parts.append(f"within the noise of {_listed(unclear)}")
    sentence = f"{head}: " + "; ".join(parts)
    if top.scheme not in DATA_PARALLEL:
        return f"{sentence}. Study A found data parallelism gains the most; these runs do not."
    if not unclear:
        return (
            f"{sentence}, as Study A found: data parallelism sends every gradient, model "
            "parallelism activations."
        )
    if clear:
        return f"{sentence}: Study A's finding holds here against {_listed(clear)} only."
    return (
        f"{sentence}: these runs do not confirm Study A's finding (a quieter machine or "
        "more steps may)."
    )


def link_gains(
    rows: Sequence[Mapping[str, Any]], spreads: Mapping[str, Spread]
) -> list[tuple[Mapping[str, Any], LinkGain]]:
    """Each row of ``link_speedup`` with its gain and band; ``spreads`` by point id."""
    return [
        (
            row,
            link_gain(
                row, spreads.get(row.get("slowest_id", "")), spreads.get(row.get("fastest_id", ""))
            ),
        )
        for row in rows
    ]


def link_comparisons(rows: Sequence[Mapping[str, Any]], spreads: Mapping[str, Spread]) -> list[str]:
    """One sentence per model comparing its schemes' gains (the sweep's answer)."""
    models: dict[str, list[LinkGain]] = {}
    for row, gain in link_gains(rows, spreads):
        models.setdefault(row.get("model", ""), []).append(gain)
    lines = []
    for model, gains in models.items():  # schemes are compared within a model only
        compared = comparison_sentence(gains)
        if compared:
            lines.append(f"{model}: {compared}" if len(models) > 1 else compared)
    return lines


def link_findings(rows: Sequence[Mapping[str, Any]], spreads: Mapping[str, Spread]) -> list[str]:
    """A sentence per row of ``link_speedup`` and one comparing them; ``spreads`` by point id."""
    several = len({row.get("model", "") for row in rows}) > 1
    lines = [
        gain_sentence(
            row,
            spreads.get(row.get("slowest_id", "")),
            spreads.get(row.get("fastest_id", "")),
            several,
        )
        for row in rows
    ]
    return lines + link_comparisons(rows, spreads)


def point_spreads(sweep: Path, ids: list[str]) -> dict[str, Spread]:
    """The step spread of each point that has a run (by point id)."""
    found = {}
    for point_id in ids:
        s = run_spread(point_dir(sweep, point_id) / "run")
        if s is not None:
            found[point_id] = s
    return found
