"""DeepSpeed's comms logger: its verbose lines and its ``log_summary`` tables (text).

- Verbose lines (``comm op: all_reduce | time (ms): 2.17 | msg size: 1.0 MB``,
  rank 0 only): one event each, its end the line's log time (millisecond
  resolution), its issue the end less the logged latency. DeepSpeed 0.19.8
  logs each op name's running total instead of the op's own latency (2.17,
  8.25, 19.56 ms for three equal all-reduces): when every op name's values
  only grow, they are read as running totals and differenced, and the run says
  so.
- ``log_summary`` tables (per op name and message size: count, total and
  average latency): without verbose lines, an aggregate-only run: each row's
  count of events of its size, their times synthetic (laid end to end with
  the row's average latency); ``validate`` and the volume tables use it, and
  every command says the times are not measurements. The straggler
  breakdown table is left out.

Sizes are the logger's, rounded to two decimals of a binary unit ("678.86
MB"); the group is the world, whose size is read from busbw/algbw
(``(n-1)/n`` for every op but broadcast and point-to-point) unless given.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from commlens.errors import UsageError
from commlens.importers.commops import canonical_op
from commlens.importers.model import Group, ImportedRun, Op, Provenance, RankTrace
from commlens.importers.registry import ImportOptions
from commlens.importers.sources import head_text, text_lines
from commlens.optable import traffic

NAME = "ds-log"
_VERBOSE = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\].*?\[Rank (?P<rank>\d+)\]"
    r"(?: rank=\d+ \|)? comm op: (?P<op>[^\s|]+)(?: \| \[Caller Func: (?P<caller>[^\]]*)\])?"
    r" \| time \(ms\): (?P<ms>[\d.]+) \| msg size: (?P<size>[\d.]+) ?(?P<unit>[KMGT]?B)"
    r"(?: \| algbw \(Gbps\): (?P<algbw>[\d.]+) +\| busbw \(Gbps\): (?P<busbw>[\d.]+))?"
)
_HEADER = re.compile(r"^Comm\. Op\s+Message Size\s+Count\s+(Total Latency|Total comm lat)")
_ROW = re.compile(
    r"^\s+(?P<size>[\d.]+) ?(?P<unit>[KMGT]?B)\s+(?P<count>\d+)"
    r"\s+(?P<total>[\d.]+)\s+(?P<avg>[\d.]+)"
)
_NAME_LINE = re.compile(r"^(?P<op>[A-Za-z_][\w]*)(?: \| \[Caller Func: (?P<caller>[^\]]*)\])?\s*$")
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def detect(path: Path) -> bool:
    text = head_text(path, 1 << 16)
    return ("comm op:" in text and "msg size:" in text) or bool(
        re.search(r"^Comm\. Op\s+Message Size\s+Count", text, re.MULTILINE)
    )


@dataclass
class _Line:
    t_end_ns: int
    rank: int
    name: str
    caller: str
    ms: float
    size: int
    ratio: float | None


@dataclass
class _Row:
    name: str
    caller: str
    size: int
    count: int
    total_ms: float
    avg_ms: float


def _bytes(value: str, unit: str) -> int:
    return round(float(value) * _UNITS[unit])


def _parse(path: Path) -> tuple[list[_Line], list[_Row]]:
    lines: list[_Line] = []
    rows: list[_Row] = []
    table: str | None = None
    name, caller = "", ""
    with text_lines(path) as fh:
        for text in fh:
            text = text.rstrip("\n")
            match = _VERBOSE.search(text)
            if match:
                when = dt.datetime.strptime(match["ts"], "%Y-%m-%d %H:%M:%S,%f")
                t_end = round(when.replace(tzinfo=dt.UTC).timestamp() * 1000) * 1_000_000
                algbw, busbw = match["algbw"], match["busbw"]
                ratio = (
                    float(busbw) / float(algbw) if algbw and busbw and float(algbw) > 0 else None
                )
                lines.append(
                    _Line(
                        t_end,
                        int(match["rank"]),
                        match["op"],
                        match["caller"] or "",
                        float(match["ms"]),
                        _bytes(match["size"], match["unit"]),
                        ratio,
                    )
                )
                continue
            header = _HEADER.match(text)
            if header:
                table = "summary" if header.group(1) == "Total Latency" else "straggler"
                continue
            if table is None or text.startswith("["):
                continue
            if text.startswith(("___", "---", "Breakdown")):
                table = None
                continue
            row = _ROW.match(text)
            if row and table == "summary":
                rows.append(
                    _Row(
                        name,
                        caller,
                        _bytes(row["size"], row["unit"]),
                        int(row["count"]),
                        float(row["total"]),
                        float(row["avg"]),
                    )
                )
                continue
            named = _NAME_LINE.match(text)
            if named:
                name, caller = named["op"], named["caller"] or ""
    return lines, rows


def running_totals(lines: list[_Line]) -> bool:
    """Whether the latencies are running totals per op name: every name logged more
    than once only grows, and some name is logged at least three times."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for line in lines:
        by_name[line.name].append(line.ms)
    if not any(len(v) >= 3 for v in by_name.values()):
        return False
    return all(all(b >= a for a, b in itertools.pairwise(v)) for v in by_name.values())


def _world_from(lines: list[_Line]) -> int | None:
    """The group size busbw/algbw = (n-1)/n gives, where the logger printed both."""
    sizes = set()
    for line in lines:
        op = canonical_op(line.name)
        if op is None or not traffic(op).shared or line.ratio is None or not 0.0 < line.ratio < 1.0:
            continue
        sizes.add(round(1.0 / (1.0 - line.ratio)))
    return max(sizes) if sizes else None


def read(paths: list[Path], options: ImportOptions) -> ImportedRun:
    lines: list[_Line] = []
    rows: list[_Row] = []
    for path in paths:
        got_lines, got_rows = _parse(path)
        lines += got_lines
        rows += got_rows
    if not lines and not rows:
        raise UsageError(
            f"{paths[0]}: no comms-logger line nor log_summary table (not DeepSpeed's comms log)"
        )
    inferred = _world_from(lines)
    world = options.world_size or inferred or 1
    prov = Provenance(
        NAME,
        format_version="comms logger text (verbose lines)" if lines else "log_summary table",
        files=[options.sources[p] for p in paths if p in options.sources],
    )
    run = ImportedRun(prov, world, backend="unknown")
    ranks = tuple(range(world))
    run.groups["world"] = Group("world", ranks, "the world (the logger names no group)")
    if options.world_size is None:
        prov.estimated.append(
            f"world size {world} read from busbw/algbw = (n-1)/n"
            if inferred
            else "world size unknown (1 assumed): give --world-size"
        )
    prov.missing += ["process groups (the world assumed)", "dtype", "peers", "steps", "phases"]
    if lines:
        _from_lines(run, lines, ranks)
    else:
        _from_rows(run, rows, ranks)
    if lines and rows:
        total = sum(r.count for r in rows)
        prov.notes.append(
            f"log_summary tables ({len(rows)} rows, {total} ops) also present; events come "
            "from the verbose lines"
        )
    return run


def _op(name: str, caller: str, size: int, ranks: tuple[int, ...]) -> Op | None:
    op = canonical_op(name)
    if op is None:
        return None
    return Op(
        op,
        0,
        0,
        pg_name="world",
        pg_ranks=ranks,
        group_size=len(ranks),
        count=0,
        bytes_in=size,
        bytes_out=size,
        size_bytes=0 if op == "barrier" else size,
        module=caller,
        api="deepspeed.comm",
        is_async=False,
    )


def _from_lines(run: ImportedRun, lines: list[_Line], ranks: tuple[int, ...]) -> None:
    prov = run.provenance
    totals = running_totals(lines)
    last: dict[str, float] = defaultdict(float)
    skipped: dict[str, int] = defaultdict(int)
    for line in lines:
        ms = line.ms
        if totals:
            ms, last[line.name] = max(0.0, ms - last[line.name]), ms
        op = _op(line.name, line.caller, line.size, ranks)
        if op is None:
            skipped[line.name] += 1
            continue
        op.t_end_ns = line.t_end_ns
        op.t_issue_ns = max(0, line.t_end_ns - round(ms * 1e6))
        op.t_wait_ns = op.t_end_ns - op.t_issue_ns
        trace = run.ranks.setdefault(line.rank, RankTrace(line.rank))
        trace.ops.append(op)
    for trace in run.ranks.values():
        trace.files = [str(f.path) for f in prov.files]
    prov.exposed = "the latency DeepSpeed logged (it times blocking calls)"
    prov.time_fields = {
        "clock": "the logging host's wall clock (log line time, ms resolution, taken as UTC)",
        "t_end_ns": "the log line's time (the logger writes when the op completed)",
        "t_issue_ns": "the end less the op's latency"
        + (" (differenced from the logged running totals)" if totals else " (as logged)"),
        "t_wait_ns": "the op's latency (DeepSpeed times blocking calls)",
    }
    if totals:
        prov.estimated.append(
            "latencies: the logged values are running totals per op name (DeepSpeed 0.19.8); "
            "each op's latency is the increase over the previous line of its name"
        )
    prov.estimated.append("sizes as the logger rounded them (2 decimals of a binary unit)")
    prov.missing.append("ranks other than 0 (the verbose logger writes rank 0 only)")
    for name, n in sorted(skipped.items()):
        prov.notes.append(f"{n} lines of {name!r} left out (not a communication op)")


def _from_rows(run: ImportedRun, rows: list[_Row], ranks: tuple[int, ...]) -> None:
    prov = run.provenance
    prov.aggregate_only = True
    trace = run.ranks.setdefault(0, RankTrace(0, files=[str(f.path) for f in prov.files]))
    t = 1_000_000_000  # 1 s: synthetic times start here
    for row in rows:
        for _ in range(row.count):
            op = _op(row.name, row.caller, row.size, ranks)
            if op is None:
                break
            span = max(1, round(row.avg_ms * 1e6))
            op.t_issue_ns, op.t_end_ns, op.t_wait_ns = t, t + span, span
            trace.ops.append(op)
            t += span
    prov.time_fields = {
        "clock": "none: a summary table has no times",
        "t_issue_ns": "synthetic: the row's events laid end to end",
        "t_end_ns": "synthetic: issue + the row's average latency",
        "t_wait_ns": "the row's average latency",
    }
    prov.estimated += [
        "aggregate-only: each summary row became Count events of its size with its average "
        "latency; only counts and volumes are data",
        "sizes as the logger rounded them (2 decimals of a binary unit)",
    ]
