"""From evidence to a diagnosis: desync, hang (roots and victims), dead ranks, stragglers.

Order of the checks: a **desync** (members of a group issuing different ops
at one sequence number) explains a hang that follows it, so it comes first;
then a **hang**: every op in flight whose group has members that never
issued it is a wait of its rank on those members. Those waits form a graph
between ranks; its sinks (ranks that wait on nobody, or a set of ranks
waiting on each other: a cycle) are the roots, every other waiting rank a
victim, explained by the chain of waits that leads to a root. A root whose
process died makes it a **dead_rank**. With nothing in flight: a dead rank
still is one; then **stragglers** (a rank arriving last in most of its
collectives, the others' wait a share of the step); else **healthy**.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from commlens.doctor.model import Diagnosis, Evidence, Op, RankFacts, Wait
from commlens.doctor.straggle import trend
from commlens.optable import EQUAL_SIZES, ROOTED
from commlens.trace.files import format_ranks

STRAGGLER_LAST_SHARE = 0.6
"""A straggler arrives last in at least this share of its collectives ..."""
STRAGGLER_STEP_SHARE = 0.05
"""... and the others' wait for it is at least this share of the step time."""


def _signature(op: Op) -> tuple[object, ...]:
    return (
        op.op,
        op.dtype,
        op.bytes_in if op.op in EQUAL_SIZES else None,
        op.peer if op.op in ROOTED else None,
    )


def _describe(op: Op) -> str:
    root = f", root {op.peer}" if op.op in ROOTED and op.peer is not None else ""
    return f"{op.op} {op.shape} {op.dtype} ({op.bytes_in:,} B{root})"


def find_desync(ev: Evidence) -> list[dict[str, object]]:
    """Per group, the members' ops at the first collective seq where they disagree."""
    per: dict[str, dict[int, dict[int, Op]]] = defaultdict(lambda: defaultdict(dict))
    for rank, ops in ev.ops.items():
        for op in ops:
            if not op.p2p:
                per[op.group][op.seq][rank] = op
    found: list[dict[str, object]] = []
    for group in sorted(per, key=lambda g: (len(g), g)):
        for seq in sorted(per[group]):
            members = per[group][seq]
            if len(members) < 2:
                continue
            sigs = {r: _signature(op) for r, op in members.items()}
            if len(set(sigs.values())) == 1:
                continue
            counts = Counter(sigs.values())
            top = max(counts.values())
            majority = [s for s, n in counts.items() if n == top]
            usual = sigs[min(members)] if len(majority) > 1 else majority[0]
            for rank in sorted(members):
                op = members[rank]
                found.append(
                    {
                        "group": group,
                        "seq": seq,
                        "rank": rank,
                        "op": op.op,
                        "shape": op.shape,
                        "dtype": op.dtype,
                        "bytes": op.bytes_in,
                        "peer": op.peer,
                        "site": op.site,
                        "odd": sigs[rank] != usual,
                        "what": _describe(op),
                    }
                )
            break
    return found


def _sccs(nodes: list[int], edges: dict[int, set[int]]) -> list[list[int]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    out: list[list[int]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def _fact_line(f: RankFacts) -> str:
    if f.signal:
        return f"its process was killed by {f.signal}"
    if f.exit_code not in (None, 0):
        return f"its process exited with code {f.exit_code}"
    if not f.recorded:
        return "it left no record at all"
    return f"its process: {f.status}"


OWN_FRAMES = ("/commlens/", "/torch/", "/threading.py")
"""Frames of these files are skipped when naming where a rank runs."""


def _first_frame(stack: str) -> str:
    """Where the rank's interrupted thread was (faulthandler's text): the innermost frame
    outside commlens, torch and threading, of the current thread (else of the last)."""
    blocks: list[tuple[str, list[str]]] = []
    for line in stack.splitlines():
        if line.startswith(("Current thread", "Thread")):
            blocks.append((line, []))
        elif blocks and line.strip().startswith("File"):
            blocks[-1][1].append(line.strip())
    if not blocks:
        return ""
    current = [b for b in blocks if b[0].startswith("Current thread")]
    frames = (current or blocks[-1:])[0][1]
    for frame in frames:
        if not any(part in frame for part in OWN_FRAMES):
            return frame
    return frames[0] if frames else ""


def _step_shift(ev: Evidence, root: int, waiter: int, group: str) -> str:
    """Where the root's collectives on ``group`` start to come in other steps than the
    waiter's (a collective skipped), or ''."""
    import numpy as np

    mine, theirs = ev.coll_steps.get((root, group)), ev.coll_steps.get((waiter, group))
    if mine is None or theirs is None:
        return ""
    a, b = mine.steps(), theirs.steps()
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]
    differ = np.flatnonzero((a != b) & (a >= 0) & (b >= 0))
    if not differ.size:
        return ""
    i = int(differ[0])
    return (
        f"; its collective #{i + 1} there came in step {a[i]}, rank {waiter}'s in "
        f"step {b[i]}: it skipped one before"
    )


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _stall_waits(ev: Evidence) -> list[Wait]:
    """Waits on stalled ranks: a rank's op in flight on a group where a member is stalled
    (the rank's own stalled groups aside)."""
    stalled_on: dict[str, set[int]] = defaultdict(set)
    for rank, where in ev.stalled.items():
        for group, _, _ in where:
            stalled_on[group].add(rank)
    out = []
    for rank, ops in ev.ops.items():
        for op in ops:
            if op.done or op.p2p or op.missing or rank in stalled_on.get(op.group, ()):
                continue
            on = tuple(sorted(stalled_on.get(op.group, set()) - {rank}))
            if on:
                out.append(Wait(rank, op, on))
    return out


@dataclass
class _WaitGraph:
    """Who waits on whom: the roots (ranks of the sink components), the ranks on a cycle
    of waits among them, and the others (victims)."""

    edges: dict[int, set[int]]
    first_wait: dict[int, Wait]
    roots: list[int]
    cycle: list[int]
    victims: list[int]


def _wait_graph(waits: list[Wait]) -> _WaitGraph:
    edges: dict[int, set[int]] = defaultdict(set)
    first_wait: dict[int, Wait] = {}
    for w in waits:
        edges[w.rank].update(w.on)
        if w.rank not in first_wait or w.op.t_issue_ns < first_wait[w.rank].op.t_issue_ns:
            first_wait[w.rank] = w
    nodes = sorted(set(edges) | {r for targets in edges.values() for r in targets})
    comps = _sccs(nodes, edges)
    comp_of = {r: i for i, comp in enumerate(comps) for r in comp}
    sinks = [
        comp
        for i, comp in enumerate(comps)
        if not any(comp_of[t] != i for r in comp for t in edges.get(r, ()))
    ]
    roots = sorted(r for comp in sinks for r in comp)
    cycle = sorted(r for comp in sinks if len(comp) > 1 for r in comp)
    return _WaitGraph(edges, first_wait, roots, cycle, sorted(set(edges) - set(roots)))


def _never_text(ev: Evidence, r: int, theirs: list[Wait]) -> str:
    """What root ``r`` never did that its waiters wait for."""
    stall = ev.stalled.get(r)
    if stall and not any(r in w.op.missing for w in theirs):
        group, seq, peers = stall[0]
        return (
            f"never completed collective #{seq} on group {group}, which rank"
            f"{'s' if len(peers) > 1 else ''} {format_ranks(list(peers))} completed: "
            "its device or its progress stopped"
        )
    if not theirs:
        return "waited on"
    w0 = theirs[0]
    never = f"never issued {w0.op.label()}"
    if w0.op.p2p:
        never = f"never issued its side of rank {w0.rank}'s {w0.op.label()}"
    who = sorted({w.rank for w in theirs if (w.op.group, w.op.seq) == (w0.op.group, w0.op.seq)})
    never += (
        f" (rank{'s' if len(who) > 1 else ''} {format_ranks(who)} "
        f"{_plural(len(who), 'waits', 'wait')} in it"
    )
    more = len({(w.rank, w.op.group, w.op.seq) for w in theirs}) - len(who)
    never += (
        f"; {more} more op{'s' if more != 1 else ''} {_plural(more, 'waits', 'wait')} on it)"
        if more
        else ")"
    )
    return never + _step_shift(ev, r, w0.rank, w0.op.group)


def _state_text(ev: Evidence, r: int, graph: _WaitGraph, failed: dict[int, Wait]) -> str:
    """What root ``r`` is doing itself."""
    f = ev.ranks.get(r, RankFacts(r))
    mine = [op for op in ev.ops.get(r, []) if not op.done]
    if r in graph.cycle:
        own = graph.first_wait[r]
        return f"it waits itself in {own.op.label()} for rank {format_ranks(list(own.on))}"
    if mine:
        state = (
            f"its own op{'s' if len(mine) > 1 else ''} in flight: "
            + ", ".join(op.label() for op in mine[:3])
            + (f" and {len(mine) - 3} more" if len(mine) > 3 else "")
        )
        if not any(op.missing for op in mine):
            state += f" (every member issued {_plural(len(mine), 'it', 'them')})"
        return state
    if f.recorded and not f.dead and r not in failed:
        return "no op in flight: it is stuck outside communication"
    return "no op in flight"


def _root_line(
    ev: Evidence, r: int, graph: _WaitGraph, theirs: list[Wait], failed: dict[int, Wait],
    dead: list[int],
) -> str:  # fmt: skip
    f = ev.ranks.get(r, RankFacts(r))
    line = f"rank {r}: {_never_text(ev, r, theirs)}; {_state_text(ev, r, graph, failed)}; "
    line += _fact_line(f)
    if r in failed and r not in dead:
        w = failed[r]
        line += f"; it is gone: rank {w.rank}'s {w.op.label()} failed waiting on it ({w.op.error})"
    frame = _first_frame(ev.stacks.get(r, ""))
    if frame:
        line += f"; running: {frame}"
    return line


def _victim_line(r: int, graph: _WaitGraph) -> str:
    """Where victim ``r`` waits, and the chain of waits that leads it to a root."""
    w = graph.first_wait[r]
    chain = [r]
    seen = {r}
    node = r
    while node not in graph.roots:
        nxt = sorted(t for t in graph.edges.get(node, ()) if t not in seen)
        if not nxt:
            break
        node = nxt[0]
        chain.append(node)
        seen.add(node)
    via = " -> ".join(str(c) for c in chain)
    return (
        f"rank {r}: waits in {w.op.label()} for rank {format_ranks(list(w.on))}"
        + (f" at {w.op.site}" if w.op.site else "")
        + (f" (waits lead {via})" if len(chain) > 2 else "")
    )


def _hang_headline(graph: _WaitGraph, dead_roots: list[int]) -> tuple[str, str]:
    """(kind, headline) of a hang: a cycle, dead roots, or roots that never issued."""
    roots, victims = graph.roots, graph.victims
    if graph.cycle:
        return "hang", (
            f"hang: a cycle of waits between ranks {format_ranks(graph.cycle)}: each waits in "
            "an op the next never issued, because it waits itself"
        )
    if dead_roots:
        return "dead_rank", (
            f"dead rank: rank{'s' if len(dead_roots) > 1 else ''} {format_ranks(dead_roots)} "
            f"died; {len(victims)} rank{'s' if len(victims) != 1 else ''} waited on "
            f"{'them' if len(dead_roots) > 1 else 'it'}"
        )
    return "hang", (
        f"hang: rank{'s' if len(roots) > 1 else ''} {format_ranks(roots)} at the root; "
        f"{len(victims)} other rank{'s' if len(victims) != 1 else ''} "
        f"{_plural(len(victims), 'waits', 'wait')} on "
        f"{'them' if len(roots) > 1 else 'it'}"
    )


def _hang(ev: Evidence, waits: list[Wait], dead: list[int]) -> Diagnosis:
    graph = _wait_graph(waits)
    # A peer's op that failed while waiting on a root: the root's process is gone.
    failed = {r: w for w in waits if w.op.error for r in w.on}
    waited_in: dict[int, list[Wait]] = defaultdict(list)
    for w in waits:
        for r in w.on:
            waited_in[r].append(w)
    lines = [
        _root_line(
            ev, r, graph, sorted(waited_in.get(r, []), key=lambda w: w.op.t_issue_ns), failed, dead
        )
        for r in graph.roots
    ]
    lines += [_victim_line(r, graph) for r in graph.victims]
    dead_roots = [r for r in graph.roots if r in dead or r in failed]
    kind, headline = _hang_headline(graph, dead_roots)
    return Diagnosis(
        kind=kind,
        headline=headline,
        root_ranks=graph.roots,
        victims=graph.victims,
        explanation=lines,
        waits=waits,
        cycle=graph.cycle,
        dead_ranks=sorted(set(dead) | set(dead_roots)),
    )


def groups_state(ev: Evidence, waits: list[Wait]) -> list[dict[str, object]]:
    """Per group with an op in flight, per member: last op completed, ops in flight, and
    the ranks it waits on there."""
    on: dict[tuple[int, str], set[int]] = defaultdict(set)
    for w in waits:
        on[(w.rank, w.op.group)].update(w.on)
    rows: list[dict[str, object]] = []
    busy = sorted({op.group for ops in ev.ops.values() for op in ops if not op.done})
    for group in busy:
        g = ev.groups.get(group)
        members = (
            list(g.ranks)
            if g and g.ranks
            else sorted(r for r, ops in ev.ops.items() if any(op.group == group for op in ops))
        )
        for r in members:
            ops = [op for op in ev.ops.get(r, []) if op.group == group]
            done = [op for op in ops if op.done]
            flying = [op for op in ops if not op.done]
            last = done[-1].label().split(" on group")[0] if done else ""
            if not last and (r, group) in ev.completed_upto:
                last = f"collective #{ev.completed_upto[(r, group)]}"
            shown = ", ".join(op.label().split(" on group")[0] for op in flying[:3])
            if len(flying) > 3:
                shown += f" and {len(flying) - 3} more"
            rows.append(
                {
                    "group": group,
                    "desc": g.desc if g else "",
                    "rank": r,
                    "last_completed": last,
                    "in_flight": shown,
                    "waits_on": format_ranks(sorted(on.get((r, group), ()))),
                }
            )
    return rows


def _stragglers(ev: Evidence) -> list[dict[str, float]]:
    out = []
    for row in ev.straggle:
        share_last = row["last_count"] / row["instances"] if row["instances"] else 0.0
        step = row.get("step_s", 0.0)
        cost = row.get("blame_per_step_s", 0.0)
        if share_last >= STRAGGLER_LAST_SHARE and step > 0 and cost / step >= STRAGGLER_STEP_SHARE:
            # a share of the step: a stall the others waited through that outlasts the
            # median step costs the whole step, no more
            out.append({**row, "share_last": share_last, "cost_share": min(cost / step, 1.0)})
    return out


def _one_node(ev: Evidence, names: list[int]) -> str:
    """', all of node HOST' when the stragglers are every rank of one node of several."""
    hosts = {f.host for f in ev.ranks.values() if f.host}
    theirs = {ev.ranks[r].host for r in names if r in ev.ranks}
    if len(names) < 2 or len(hosts) < 2 or len(theirs) != 1 or "" in theirs:
        return ""
    host = theirs.pop()
    on_host = sorted(r for r, f in ev.ranks.items() if f.host == host)
    return f": all of node {host}" if on_host == sorted(names) else f" (all on node {host})"


def diagnose(ev: Evidence) -> Diagnosis:
    """The diagnosis of ``ev``: kind, root ranks, and the lines that explain the rest."""
    dead = sorted(r for r, f in ev.ranks.items() if f.dead)
    waits = [
        Wait(op.rank, op, op.missing)
        for ops in ev.ops.values()
        for op in ops
        if not op.done and op.missing
    ]
    # A stalled rank waits on nobody: its own device stopped first.
    waits = [w for w in waits if w.rank not in ev.stalled] + _stall_waits(ev)
    mismatch = find_desync(ev)
    if mismatch:
        odd = sorted({int(str(m["rank"])) for m in mismatch if m["odd"]})
        first = mismatch[0]
        odd_what = next(str(m["what"]) for m in mismatch if m["odd"])
        usual_what = next((str(m["what"]) for m in mismatch if not m["odd"]), "")
        lines = [
            f"rank {m['rank']}: {m['what']}" + (f" at {m['site']}" if m["site"] else "")
            for m in mismatch
        ]
        diag = Diagnosis(
            kind="desync",
            headline=(
                f"desync: on group {first['group']}, collective #{first['seq']}: rank"
                f"{'s' if len(odd) > 1 else ''} {format_ranks(odd)} called {odd_what}, "
                f"the others {usual_what}"
            ),
            root_ranks=odd,
            explanation=lines,
            mismatch=mismatch,
            waits=waits,
            dead_ranks=dead,
        )
    elif waits:
        diag = _hang(ev, waits, dead)
    elif dead:
        lines = [f"rank {r}: {_fact_line(ev.ranks[r])}" for r in dead]
        diag = Diagnosis(
            kind="dead_rank",
            headline=f"dead rank: rank{'s' if len(dead) > 1 else ''} {format_ranks(dead)} died",
            root_ranks=dead,
            explanation=lines,
            dead_ranks=dead,
        )
    elif stragglers := _stragglers(ev):
        names = [int(s["rank"]) for s in stragglers]
        lines = [
            f"rank {int(s['rank'])}: arrived last in {int(s['last_count'])} of "
            f"{int(s['instances'])} collectives; the others waited {s['blame_per_step_s']:.3f} s "
            f"per step for it, {s['cost_share']:.0%} of the {s['step_s']:.3f} s step"
            + (f"; {t}" if (t := trend(ev.lateness.get(int(s["rank"]), []))) else "")
            for s in stragglers
        ]
        diag = Diagnosis(
            kind="straggler",
            headline=f"straggler: rank{'s' if len(names) > 1 else ''} {format_ranks(names)} "
            f"{_plural(len(names), 'arrives', 'arrive')} last, step after step"
            + _one_node(ev, names),
            root_ranks=names,
            explanation=lines,
            stragglers=stragglers,
        )
    else:
        wait = ev.largest_wait
        diag = Diagnosis(
            kind="healthy",
            headline="healthy: no hang, desync, straggler or dead rank"
            + (f"; the largest wait: {wait[0] * 1e3:.3f} ms ({wait[1]})" if wait else ""),
            root_ranks=[],
        )
    diag.groups_state = groups_state(ev, diag.waits)
    return diag
