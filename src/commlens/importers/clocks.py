"""Clock offsets between hosts, from the ends of blocking collectives.

Ranks on one host share its clock; ranks on other hosts differ by their
clocks' skew (milliseconds under NTP) and no trace holds a handshake. The
members of a blocking collective (all-reduce, all-gather, reduce-scatter,
all-to-all, barrier) all finish within microseconds of each other, so the
median difference of their end times, over the collectives both hosts took
part in, estimates the offset. Collectives are matched by group and sequence
number where the source numbers them, else by group, step and their index in
it, and must agree in op and size. A rank whose host is not
known is its own clock domain. The offsets go into each rank's ``clock``
(the run format's one formula moves its times), the residual (the spread of
matched ends after alignment) into the manifest.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from commlens.importers.model import ImportedRun
from commlens.optable import BLOCKING

Key = tuple[str, str, int, int]


def _ends(run: ImportedRun) -> dict[int, dict[Key, tuple[str, int, int]]]:
    """rank -> match key -> (op, size, end) of its blocking collectives."""
    out: dict[int, dict[Key, tuple[str, int, int]]] = {}
    for rank, trace in run.ranks.items():
        seen: dict[tuple[str, int], int] = defaultdict(int)
        keyed: dict[Key, tuple[str, int, int]] = {}
        for op in sorted(trace.ops, key=lambda o: o.t_issue_ns):
            if op.op not in BLOCKING or len(op.pg_ranks) < 2 or not op.end_known:
                continue
            if op.group_seq is not None:
                key: Key = (op.pg_name, "seq", 0, op.group_seq)
            else:
                key = (op.pg_name, "step", op.step, seen[(op.pg_name, op.step)])
                seen[(op.pg_name, op.step)] += 1
            keyed[key] = (op.op, op.size_bytes, op.t_end_ns)
        out[rank] = keyed
    return out


def align_ranks(run: ImportedRun) -> None:
    """Set each rank's clock offset (onto the lowest rank's host) and record the residual."""
    domain = {r: (t.host or f"rank {r}") for r, t in run.ranks.items()}
    prov = run.provenance
    if len(set(domain.values())) <= 1:
        prov.clock = {"domains": 1, "note": "every rank on one host: one clock, nothing moved"}
        return
    ends = _ends(run)
    if not any(ends.values()):
        prov.clock = {
            "domains": len(set(domain.values())),
            "note": "no blocking collective with a known end: clocks left as written",
        }
        return
    ref_rank = min(run.ranks)
    offsets: dict[str, int] = {domain[ref_rank]: 0}
    matched: dict[str, int] = {}
    for dom in sorted(set(domain.values()) - {domain[ref_rank]}):
        diffs = []
        for r_ref in (r for r in run.ranks if domain[r] == domain[ref_rank]):
            for r in (r for r in run.ranks if domain[r] == dom):
                for key, (op, size, end) in ends[r].items():
                    other = ends[r_ref].get(key)
                    if other is not None and other[0] == op and other[1] == size:
                        diffs.append(other[2] - end)
        if diffs:
            offsets[dom] = int(statistics.median(diffs))
            matched[dom] = len(diffs)
    unaligned = sorted(d for d in set(domain.values()) if d not in offsets)
    for r, trace in run.ranks.items():
        off = offsets.get(domain[r])
        if off is not None and off != 0:
            trace.meta["clock"] = {
                "offset_ns": off,
                "drift": 0.0,
                "t_ref_ns": 0,
                "source": "import: ends of blocking collectives",
            }
    spreads = []
    by_key: dict[Key, list[int]] = defaultdict(list)
    for r, keyed in ends.items():
        off = offsets.get(domain[r], 0)
        for key, (_, _, end) in keyed.items():
            by_key[key].append(end + off)
    for values in by_key.values():
        if len(values) > 1:
            spreads.append(max(values) - min(values))
    prov.clock = {
        "domains": len(set(domain.values())),
        "domain_of": "host name"
        if all(t.host for t in run.ranks.values())
        else "host name, else each rank alone (no host in the trace)",
        "method": (
            "median difference of the ends of blocking collectives matched by "
            "(group, sequence number) or (group, step, index), same op and size"
        ),
        "offsets_ns": {d: offsets[d] for d in sorted(offsets)},
        "matched_ends": matched,
        "residual_median_ns": int(statistics.median(spreads)) if spreads else None,
        "residual_max_ns": max(spreads) if spreads else None,
    }
    if unaligned:
        prov.clock["not_aligned"] = unaligned
        run.warnings.append(
            f"no blocking collective shared with rank {ref_rank}'s host: clocks of "
            f"{', '.join(unaligned)} left as written"
        )
