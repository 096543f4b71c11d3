"""The run ``whatif`` replays: the matched run's ops, refused where a replay cannot honestly
re-time them.

The run is read by the matched-run layer (:func:`commlens.analysis.matched.ops.read_ops`);
what is ``whatif``'s own is the refusal, in one line: a rank missing or
damaged (its peers' collectives would have no partner), times that cannot be
or are synthetic, no events, no step markers.
"""

from __future__ import annotations

from pathlib import Path

from commlens.analysis.matched.ops import RunOps, read_ops
from commlens.errors import RunFormatError
from commlens.trace.files import format_ranks
from commlens.trace.manifest import SYNTHETIC_TIMES, time_semantics
from commlens.trace.reader import RunView

Trace = RunOps
"""What a replay reads: the matched run's ops (:class:`RunOps`). The columns of
:data:`commlens.whatif.model.BUILD_ONLY` are emptied once a program is built from it."""


def _names(line: str, rank: int) -> bool:
    """Whether a reader's warning ``line`` is about rank ``rank`` (it skipped the rank, or
    the rank has no file)."""
    return line.endswith(f"rank {rank} skipped") or line.startswith(f"rank {rank}: ")


def read_trace(source: str | Path | RunView) -> Trace:
    """The run in ``source`` (a directory, or a view of one) for replay;
    :class:`RunFormatError` when it cannot be replayed."""
    ops = read_ops(source)
    check_replayable(ops, str(source.path if isinstance(source, RunView) else source), ops.events)
    return ops


def check_replayable(ops: RunOps, where: str, events: int) -> None:
    """:class:`RunFormatError` where the run ``ops`` read (of ``events`` events: its
    own, or those its chunks hold) cannot be replayed."""
    if time_semantics(ops.manifest) == SYNTHETIC_TIMES:
        raise RunFormatError(
            f"{where}: its times are synthetic (an aggregate-only import: only op counts and "
            "bytes are data); a replay needs measured times"
        )
    if ops.missing_ranks:
        missing = ops.missing_ranks
        why = [line for line in ops.warnings if any(_names(line, r) for r in missing)]
        raise RunFormatError(
            f"{where}: rank(s) {format_ranks(missing)} missing or unreadable"
            + (f" ({'; '.join(why[:3])})" if why else "")
            + "; a replay needs every rank's events (their peers' collectives have no partner)"
        )
    if ops.problems:
        problems = ops.problems
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RunFormatError(
            f"{where}: {problems[0]}{more}; a replay of times that cannot be is no answer"
        )
    if not events:
        raise RunFormatError(f"{where}: the run holds no communication events to replay")
    if not ops.step_rank.size:
        raise RunFormatError(
            f"{where}: the run has no step markers (optimizer steps or commlens.step()); "
            "whatif reports per-step times and needs them"
        )
