"""A diagnosis's evidence from Flight Recorder dumps.

An entry is done when the dump says ``completed`` or ``retired`` (gloo never
moves an entry past ``scheduled``, but retires it when it ends). A member
has issued collective *s* of a group when one of its entries on the group
carries a collective sequence id of *s* or more (a send or receive carries
the count of collectives before it), or, with no entry on the group in its
buffer, when its ``pg_status`` says it enqueued *s* and the group runs no
point-to-point ops (whose ids that counter mixes in). A send or receive in
flight is matched by its peer's own side: in a group of two by sequence id,
in a larger one by an entry of the other direction with this rank as peer.

A rank whose ``pg_status`` says it never completed a collective that its
peers in the group completed is *stalled* there: the op ran, but the rank
never saw it end (its device failed, or its progress thread stopped).
"""

from __future__ import annotations

from collections import defaultdict

from commlens.doctor.model import Evidence, Group, Op, RankFacts
from commlens.importers.flight_recorder import FrDumps, FrEntry


def _shape(e: FrEntry) -> str:
    sizes = e.input_sizes if e.input_sizes else e.output_sizes
    return "x".join(str(d) for d in sizes[0]) if len(sizes) == 1 else str(list(sizes))


def _stalled(
    dumps: FrDumps, groups: dict[str, Group], p2p_groups: set[str]
) -> dict[int, list[tuple[str, int, tuple[int, ...]]]]:
    """Ranks that never completed a collective their peers completed (``pg_status``).

    Only groups that run no point-to-point op: there the counters are collective
    sequence ids, which the members share.
    """
    out: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
    for name, group in sorted(groups.items()):
        if name in p2p_groups:
            continue
        done = {
            r: dumps.ranks[r].progress[name]
            for r in group.ranks
            if r in dumps.ranks and name in dumps.ranks[r].progress
        }
        for rank, mine in sorted(done.items()):
            seq = mine.completed + 1
            if mine.enqueued < seq:
                continue
            peers = tuple(r for r, p in sorted(done.items()) if r != rank and p.completed >= seq)
            if peers:
                out.setdefault(rank, []).append((name, seq, peers))
    return out


def evidence_from_dumps(dumps: FrDumps) -> Evidence:
    """The ops of every rank's dump, each in-flight one with the members that never issued it."""
    by_group: dict[tuple[int, str], list[FrEntry]] = defaultdict(list)
    p2p_groups: set[str] = set()
    for fr in dumps.ranks.values():
        for e in fr.entries:
            by_group[(e.rank, e.group)].append(e)
            if e.is_p2p:
                p2p_groups.add(e.group)
    groups = {
        name: Group(name, g.desc, g.ranks) for name, g in dumps.groups.items() if name or g.ranks
    }

    def issued_collective(member: int, group: str, seq: int) -> bool:
        if member not in dumps.ranks:
            return False
        mine = by_group.get((member, group))
        if mine:
            return max(e.collective_seq_id for e in mine) >= seq
        progress = dumps.ranks[member].progress.get(group)
        return progress is not None and group not in p2p_groups and progress.enqueued >= seq

    def issued_p2p(e: FrEntry) -> bool:
        peer = e.peer
        if peer is None or peer not in dumps.ranks:
            return False
        theirs = [x for x in by_group.get((peer, e.group), []) if x.is_p2p]
        if len(groups.get(e.group, Group("", "", ())).ranks) == 2:
            if theirs:
                return max(x.p2p_seq_id for x in theirs) >= e.p2p_seq_id
            return False
        other = "recv" if e.op == "send" else "send"
        return any(x.op == other and x.peer == e.rank for x in theirs)

    stalled = _stalled(dumps, groups, p2p_groups)
    ops: dict[int, list[Op]] = {}
    for rank, fr in sorted(dumps.ranks.items()):
        out = []
        for e in fr.entries:
            done = e.state == "completed" or e.retired
            missing: tuple[int, ...] = ()
            if not done:
                if e.is_p2p:
                    missing = () if issued_p2p(e) or e.peer is None else (e.peer,)
                else:
                    members = groups.get(e.group, Group("", "", ())).ranks
                    missing = tuple(
                        m
                        for m in members
                        if m != rank and not issued_collective(m, e.group, e.collective_seq_id)
                    )
            out.append(
                Op(
                    rank=rank,
                    group=e.group,
                    seq=e.seq,
                    p2p=e.is_p2p,
                    op=e.op,
                    dtype=e.dtype,
                    bytes_in=e.bytes_in,
                    shape=_shape(e),
                    peer=e.peer,
                    done=done,
                    t_issue_ns=e.t_issue_ns,
                    t_end_ns=e.t_end_ns,
                    site=e.frames[0] if e.frames else "",
                    missing=missing,
                )
            )
        ops[rank] = out
    facts = {}
    for rank in range(dumps.world_size):
        fr_rank = dumps.ranks.get(rank)
        if fr_rank is None:
            facts[rank] = RankFacts(rank, status="no dump", recorded=False)
            continue
        last = max((e.t_issue_ns for e in fr_rank.entries), default=None)
        status = "dumped" if fr_rank.entries else "dumped, no op in its buffer"
        facts[rank] = RankFacts(rank, status=status, last_ns=last)
    lib = next(iter(dumps.ranks.values())).lib_version if dumps.ranks else ""
    source = (
        f"Flight Recorder dumps ({dumps.backend}{' ' + lib if lib else ''}, FR {dumps.version})"
    )
    return Evidence(
        source=source,
        path=str(dumps.source),
        world_size=dumps.world_size,
        groups=groups,
        ops=ops,
        ranks=facts,
        stalled=stalled,
        completed_upto={
            (r, g): p.completed
            for r, fr in dumps.ranks.items()
            for g, p in fr.progress.items()
            if g not in p2p_groups and p.completed >= 0
        },
        warnings=list(dumps.warnings),
    )
