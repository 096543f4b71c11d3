"""The scoring and the tables of ``whatif_accuracy.py``, kept apart from the runs.

Pure functions over measured and predicted step times (seconds), so that the
verdicts can be checked without a run: a cell is one (job, link); its
predictions are one per capture, its runs the steps measured on its link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SELF_LIMIT = 0.05
"""A self-replay (the capture predicted on its own link) is judged within 5%."""
CROSS_LIMIT = 0.10
"""A prediction for another link is judged within 10%."""
VOID_CV = 0.05
"""A window whose controlled job's runs vary more than this on any link is void."""
NOISE_TOO_LARGE = "host noise too large"


def mean(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("mean of no values")
    return sum(xs) / len(xs)


def cv(xs: Sequence[float]) -> float:
    """Coefficient of variation: sample standard deviation over the mean (0 for one value)."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return float(var**0.5 / m)


def noise_floor(xs: Sequence[float]) -> float:
    """Mean |error| of one repeated run taken as the prediction of the others' mean:
    the error a perfect model would still show against these runs (0 for one run)."""
    if len(xs) < 2:
        return 0.0
    errs = []
    for i, x in enumerate(xs):
        rest = [y for j, y in enumerate(xs) if j != i]
        errs.append(abs(x / mean(rest) - 1.0))
    return mean(errs)


@dataclass(frozen=True)
class Cell:
    """One (job, link): each capture's prediction of the link and the runs measured on it.

    For the self cell (the capture link) ``runs_s`` are the captures themselves and
    ``guesses_s[i]`` is capture ``i`` replayed on its own link.
    """

    job: str
    link: str
    own: bool
    controlled: bool
    guesses_s: list[float]
    runs_s: list[float]
    capture_cv: float = 0.0
    """The cv of the capture link's runs (the predictions inherit their noise)."""

    @property
    def limit(self) -> float:
        return SELF_LIMIT if self.own else CROSS_LIMIT

    @property
    def errors(self) -> list[float]:
        """Each capture's prediction against the mean of the runs (self: against itself)."""
        if self.own:
            return [g / r - 1.0 for g, r in zip(self.guesses_s, self.runs_s, strict=True)]
        m = mean(self.runs_s)
        return [g / m - 1.0 for g in self.guesses_s]

    @property
    def error(self) -> float:
        """The mean of the captures' predictions against the mean of the runs."""
        return mean(self.guesses_s) / mean(self.runs_s) - 1.0

    @property
    def sigma(self) -> float:
        """The noise a verdict must see through: the larger of the runs' cv and the captures'."""
        return max(cv(self.runs_s), self.capture_cv)

    @property
    def verdict(self) -> str:
        """pass / fail; for a real job, only when twice its noise is within the limit of
        10% (else that the host's noise is too large to judge it)."""
        if not self.controlled and 2.0 * self.sigma > CROSS_LIMIT:
            return NOISE_TOO_LARGE
        return "pass" if abs(self.error) <= self.limit else "fail"


@dataclass
class Window:
    """One window's cells, and whether the controlled jobs' noise voids it."""

    cells: list[Cell] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)

    def void_reasons(self) -> list[str]:
        """Why the window is void: a controlled job whose runs on a link vary by more
        than 5% (cv); empty when it is scored."""
        why = []
        for c in self.cells:
            if c.controlled and cv(c.runs_s) > VOID_CV:
                why.append(f"{c.job} on {c.link}: cv {cv(c.runs_s):.1%}")
        return why


def sensitivity(cells: list[Cell], job: str, slow: str, fast: str) -> tuple[float, float]:
    """(predicted, measured) step on ``slow`` over ``fast`` for ``job``: means of the
    captures' predictions and of the runs."""
    by = {c.link: c for c in cells if c.job == job}
    guess = mean(by[slow].guesses_s) / mean(by[fast].guesses_s)
    real = mean(by[slow].runs_s) / mean(by[fast].runs_s)
    return guess, real


def _ms(xs: Sequence[float]) -> str:
    return ", ".join(f"{x * 1e3:.1f}" for x in xs)


def table(window: Window, title: str, slow: str, fast: str) -> str:
    """The window's table: per cell the runs, each capture's error, the mean prediction's
    error, the noise floor and cv, and the verdict; then the sign of the self-replays and
    the sensitivity per job."""
    head = (
        f"{'job':14s} {'link':9s} {'predicted':>9s} {'measured':>9s} {'error':>7s}  "
        f"{'per capture':22s} {'floor':>6s} {'cv':>6s}  {'verdict':22s} runs (ms)"
    )
    lines = [title, head]
    for c in window.cells:
        each = " ".join(f"{e:+.1%}" for e in c.errors)
        lines.append(
            f"{c.job:14s} {c.link + (' *' if c.own else ''):9s} {mean(c.guesses_s) * 1e3:7.1f}ms "
            f"{mean(c.runs_s) * 1e3:7.1f}ms {c.error:+7.1%}  {each:22s} "
            f"{noise_floor(c.runs_s):6.1%} {cv(c.runs_s):6.1%}  {c.verdict:22s} {_ms(c.runs_s)}"
        )
    lines.append(
        "* the capture link: each capture replayed on its own link against itself "
        "(self-replay); other links: the mean of the link's runs"
    )
    selfs = [e for c in window.cells if c.own for e in c.errors]
    if selfs:
        short = sum(e < 0 for e in selfs)
        lines.append(
            f"self-replays: {short} of {len(selfs)} short, {len(selfs) - short} long "
            f"(mean {mean(selfs):+.1%})"
        )
    for controlled in (True, False):
        group = [c for c in window.cells if c.controlled == controlled]
        if not group:
            continue
        counts: dict[str, int] = {}
        for c in group:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
        said = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        lines.append(f"{'controlled' if controlled else 'real'} cells: {said}")
    for job in dict.fromkeys(c.job for c in window.cells):
        links = {c.link for c in window.cells if c.job == job}
        if {slow, fast} <= links:
            guess, real = sensitivity(window.cells, job, slow, fast)
            lines.append(
                f"sensitivity {job} ({slow} over {fast}): predicted {guess:.2f}x, "
                f"measured {real:.2f}x ({guess / real - 1.0:+.1%})"
            )
    loads = [x for x in window.loads if x == x]  # nan: a reused run's load is not known
    if loads:
        lines.append(f"load average (1 min) over the runs: {min(loads):.1f} to {max(loads):.1f}")
    return "\n".join(lines)
