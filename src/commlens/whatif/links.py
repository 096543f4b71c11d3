"""The replay's shared links, on flat arrays (compiled kernels).

A node's link out that messages of several channels (sockets) cross is served
as its shaper serves them. The shaper's queue is one FIFO of packets, and a
message's bytes enter it at once (the veth's rate is many times the link's):
the link carries the messages in the order they came, each at its full rate,
and those that came at the same time side by side (their packets interleaved,
sharing the rate); a channel's messages one after the other (one socket). A
message is its wire time at the link's rate; the bucket's credit, what the
node's bucket holds when the link goes busy (it refills only while the link
idles), goes to the messages that cross first, split equally between those
side by side, and crosses at once.

The replay reaches the ranks out of time order, so a message's end is found
only once no message can come on the link before it: :func:`serve` without
``commit`` is when the first message on it would be done with the messages
known so far; with ``commit`` it serves the link until then. The replay
finishes the earliest of all links' next ends (:func:`pop_due`) once no rank can
go on (a rank goes on only from an end, so a message it puts on a link
afterwards comes no earlier; one that comes earlier all the same, its pair
started by a later end, comes at the link's time).

Every link's messages have a segment of flat arrays (``base``) sized in
advance for all that can come there. The link's bucket is its node's
(:mod:`~commlens.whatif.buckets`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from commlens.whatif.buckets import Buckets, bisect_right, level
from commlens.whatif.compiled import index, kernel, larger, smaller

DONE_S = 1e-12
"""Seconds of wire a message may have left on a link and be done (float rounding)."""

NOW, TOKENS, CAME = 0, 1, 2
"""Columns of :attr:`Links.lf`: the time the link was served until, its bucket's credit
left in its busy spell, when the messages crossing it came."""
TAKEN, JOINS, LINE, COUNT, VERSION, CROSSING = 0, 1, 2, 3, 4, 5
"""Columns of :attr:`Links.li`: messages of the link's segment taken onto it, messages
put on it, messages in line behind those crossing, messages put on it so far (their
order), its changes (an entry of the queue of links is current only with the latest),
messages crossing it."""
SCRATCH, GOING, FINISHED, HEAP = 0, 1, 2, 3
"""Slots of :attr:`Links.counts`."""


class Links(NamedTuple):
    """The shared links' and buckets' state (arrays; see the module docstring)."""

    shared: np.ndarray
    """Per link (node), 1 where messages of several channels cross it."""
    lf: np.ndarray
    li: np.ndarray
    base: np.ndarray
    """Per link, where its segment of the message arrays starts (one more: the end)."""
    jt: np.ndarray
    """Messages put on the links, per link in time order: when it came, its order,
    channel, pair, seconds of wire, the bucket credit it may take."""
    jn: np.ndarray
    jch: np.ndarray
    jpair: np.ndarray
    jwire: np.ndarray
    jcredit: np.ndarray
    lt: np.ndarray
    """Messages in line behind those crossing, in (time, order): as :attr:`jt` ..."""
    ln: np.ndarray
    lch: np.ndarray
    lpair: np.ndarray
    lwire: np.ndarray
    lcredit: np.ndarray
    cpair: np.ndarray
    """Per link, the pairs crossing it side by side, [link, slot], in the order they came."""
    cleft: np.ndarray
    """Seconds of their wire still to cross."""
    cch: np.ndarray
    """Their channels."""
    spair: np.ndarray
    """The crossing of the link being served (its copy: :func:`serve` without commit)."""
    sleft: np.ndarray
    sch: np.ndarray
    going: np.ndarray
    """Messages of a batch that go onto the link (indices into their arrays)."""
    wants: np.ndarray
    shares: np.ndarray
    order: np.ndarray
    finished: np.ndarray
    """Pairs done at the last :func:`serve` with commit."""
    got_t: np.ndarray
    """Per pair (from :attr:`first_pair`), when it came onto its link and the credit it
    got."""
    got: np.ndarray
    first_pair: int
    heap_t: np.ndarray
    """The queue of links, a heap of (next end, version, link)."""
    heap_v: np.ndarray
    heap_k: np.ndarray
    counts: np.ndarray


@kernel
def join(L: Links, k: int, t: float, channel: int, i: int, wire: float, credit: float) -> None:
    """Pair ``i`` of ``channel`` comes on link ``k`` at ``t`` with ``wire`` seconds to
    cross, of which the bucket may save it ``credit``."""
    L.li[k, COUNT] += 1
    came = larger(t, L.lf[k, NOW])
    lo = L.base[k]
    hi = lo + L.li[k, JOINS]
    at = bisect_right(L.jt, lo + L.li[k, TAKEN], hi, came)
    for j in range(hi, at, -1):
        L.jt[j], L.jn[j], L.jch[j] = L.jt[j - 1], L.jn[j - 1], L.jch[j - 1]
        L.jpair[j], L.jwire[j], L.jcredit[j] = L.jpair[j - 1], L.jwire[j - 1], L.jcredit[j - 1]
    L.jt[at], L.jn[at], L.jch[at] = came, L.li[k, COUNT], channel
    L.jpair[at], L.jwire[at], L.jcredit[at] = i, wire, credit
    L.li[k, JOINS] += 1


@kernel
def line_up(L: Links, k: int, j: int) -> None:
    """Message ``j`` of link ``k``'s joins waits in line, in (time, order)."""
    t, n = L.jt[j], L.jn[j]
    lo = L.base[k]
    hi = lo + L.li[k, LINE]
    at = hi
    while at > lo and (t < L.lt[at - 1] or (t == L.lt[at - 1] and n < L.ln[at - 1])):
        at -= 1
    for q in range(hi, at, -1):
        L.lt[q], L.ln[q], L.lch[q] = L.lt[q - 1], L.ln[q - 1], L.lch[q - 1]
        L.lpair[q], L.lwire[q], L.lcredit[q] = L.lpair[q - 1], L.lwire[q - 1], L.lcredit[q - 1]
    L.lt[at], L.ln[at], L.lch[at] = t, n, L.jch[j]
    L.lpair[at], L.lwire[at], L.lcredit[at] = L.jpair[j], L.jwire[j], L.jcredit[j]
    L.li[k, LINE] += 1


@kernel
def water_fill(L: Links, held: float, n: int) -> None:
    """``held`` split equally between the claims ``wants[:n]``, of at most ``wants[j]``
    each (what one does not take, the others may), into ``shares[:n]``."""
    order, wants = L.order, L.wants
    for x in range(n):  # the claims in rising order, equal ones as they came
        y = x
        while y > 0 and wants[order[y - 1]] > wants[x]:
            order[y] = order[y - 1]
            y -= 1
        order[y] = x
    for m in range(n):
        j = order[m]
        share = smaller(wants[j], held / (n - m))
        L.shares[j] = share
        held -= share


@kernel
def busy(L: Links, channels: np.ndarray, n_going: int, c: int) -> bool:
    """Whether a message of channel ``c`` is crossing or goes onto the link."""
    for x in range(L.counts[SCRATCH]):
        if L.sch[x] == c:
            return True
    for x in range(n_going):
        if channels[L.going[x]] == c:
            return True
    return False


@kernel
def cross(
    L: Links,
    k: int,
    src: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    a: int,
    b: int,
    t: float,
    tokens: float,
    commit: bool,
    from_joins: bool,
) -> float:
    """The messages ``a:b`` of ``src`` (link ``k``'s joins, or its line), which came at
    ``t``, cross beside those crossing (a channel's second one behind: from the joins
    into the line, with ``commit``), taking the bucket's ``tokens``: what is left of
    them."""
    _, _, channels, pairs, wire, credit = src
    n_going = 0
    for q in range(a, b):
        if busy(L, channels, n_going, channels[q]):
            if commit and from_joins:
                line_up(L, k, q)
            continue
        L.going[n_going] = q
        L.wants[n_going] = credit[q]
        n_going += 1
    water_fill(L, tokens, n_going)
    n = L.counts[SCRATCH]
    total = 0.0
    for x in range(n_going):
        q, got = L.going[x], L.shares[x]
        L.spair[n], L.sleft[n], L.sch[n] = pairs[q], wire[q] - got, channels[q]
        n += 1
        if commit:
            L.got_t[pairs[q] - L.first_pair], L.got[pairs[q] - L.first_pair] = t, got
        total += got
    L.counts[SCRATCH] = n
    L.counts[GOING] = n_going
    return tokens - total


@kernel
def joins(
    L: Links,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The arrays of the messages put on the links."""
    return L.jt, L.jn, L.jch, L.jpair, L.jwire, L.jcredit


@kernel
def line(L: Links) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The arrays of the messages in line."""
    return L.lt, L.ln, L.lch, L.lpair, L.lwire, L.lcredit


@kernel
def serve(L: Links, B: Buckets, k: int, commit: bool) -> float:
    """When the first message on link ``k`` is done, with the messages known so far;
    with ``commit``, serve the link until then (the pairs done: :attr:`Links.finished`)."""
    n = L.li[k, CROSSING]
    for x in range(n):
        L.spair[x], L.sleft[x], L.sch[x] = L.cpair[k, x], L.cleft[k, x], L.cch[k, x]
    L.counts[SCRATCH] = n
    now, tokens, came = L.lf[k, NOW], L.lf[k, TOKENS], L.lf[k, CAME]
    lo = L.base[k]
    j, hi = lo + L.li[k, TAKEN], lo + L.li[k, JOINS]
    done = math.inf
    while True:
        n = L.counts[SCRATCH]
        done = now + least_left(L, n) * n if n else math.inf
        if j == hi:
            break
        t = larger(L.jt[j], now)
        if t >= done:
            break
        if n and t > came:  # behind the messages crossing
            if not commit:
                break
            line_up(L, k, j)
            j += 1
            continue
        if not n:  # an idle link (nothing behind): its bucket refilled meanwhile
            if B.on:
                tokens = level(B, k, t)
            now = came = t
        b = j
        while b < hi and larger(L.jt[b], now) <= t:
            b += 1
        tokens = cross(L, k, joins(L), j, b, t, tokens, commit, True)
        j = b
    if commit and done != math.inf:
        finish(L, k, done, now, tokens, j - lo, came)
    return done


@kernel
def least_left(L: Links, n: int) -> float:
    """The least wire left of the ``n`` messages crossing."""
    least = L.sleft[0]
    for x in range(1, n):
        least = smaller(least, L.sleft[x])
    return least


@kernel
def finish(
    L: Links, k: int, done: float, now: float, tokens: float, taken: int, came: float
) -> None:
    """Link ``k`` served until ``done``: its first message and those as good as done
    leave it (:attr:`Links.finished`); if none is left crossing, the messages next in
    line cross, from the busy link."""
    n = L.counts[SCRATCH]
    for x in range(n):
        L.sleft[x] -= (done - now) / n
    first = 0
    for x in range(1, n):
        if L.sleft[x] < L.sleft[first]:
            first = x
    n_done = kept = 0
    for x in range(n):
        if x == first or L.sleft[x] <= DONE_S:
            L.finished[n_done] = L.spair[x]
            n_done += 1
        else:
            L.spair[kept], L.sleft[kept], L.sch[kept] = L.spair[x], L.sleft[x], L.sch[x]
            kept += 1
    L.counts[SCRATCH], L.counts[FINISHED] = kept, n_done
    lo = L.base[k]
    if not kept and L.li[k, LINE]:
        came = L.lt[lo]
        b = lo
        while b < lo + L.li[k, LINE] and L.lt[b] == came:
            b += 1
        tokens = cross(L, k, line(L), lo, b, came, tokens, True, False)
        leave_line(L, k)
    for x in range(L.counts[SCRATCH]):
        L.cpair[k, x], L.cleft[k, x], L.cch[k, x] = L.spair[x], L.sleft[x], L.sch[x]
    L.li[k, CROSSING], L.li[k, TAKEN] = L.counts[SCRATCH], taken
    L.lf[k, NOW], L.lf[k, TOKENS], L.lf[k, CAME] = done, tokens, came


@kernel
def leave_line(L: Links, k: int) -> None:
    """The messages of link ``k``'s line that went onto the link (:attr:`Links.going`,
    in order) leave it."""
    lo, n_going = L.base[k], L.counts[GOING]
    hi = lo + L.li[k, LINE]
    at, x = lo, 0
    for q in range(lo, hi):
        if x < n_going and L.going[x] == q:
            x += 1
            continue
        L.lt[at], L.ln[at], L.lch[at] = L.lt[q], L.ln[q], L.lch[q]
        L.lpair[at], L.lwire[at], L.lcredit[at] = L.lpair[q], L.lwire[q], L.lcredit[q]
        at += 1
    L.li[k, LINE] -= n_going


@kernel
def earlier(L: Links, a: int, b: int) -> bool:
    """Whether entry ``a`` of the queue of links comes before entry ``b``."""
    if L.heap_t[a] != L.heap_t[b]:
        return L.heap_t[a] < L.heap_t[b]
    if L.heap_v[a] != L.heap_v[b]:
        return L.heap_v[a] < L.heap_v[b]
    return L.heap_k[a] < L.heap_k[b]


@kernel
def swap(L: Links, a: int, b: int) -> None:
    L.heap_t[a], L.heap_t[b] = L.heap_t[b], L.heap_t[a]
    L.heap_v[a], L.heap_v[b] = L.heap_v[b], L.heap_v[a]
    L.heap_k[a], L.heap_k[b] = L.heap_k[b], L.heap_k[a]


@kernel
def due(L: Links, B: Buckets, k: int) -> None:
    """Put link ``k`` on the queue of links at its next end."""
    L.li[k, VERSION] += 1
    t = serve(L, B, k, False)
    if t == math.inf:
        return
    x = L.counts[HEAP]
    L.counts[HEAP] += 1
    L.heap_t[x], L.heap_v[x], L.heap_k[x] = t, L.li[k, VERSION], k
    while x > 0 and earlier(L, x, (x - 1) // 2):
        swap(L, x, (x - 1) // 2)
        x = (x - 1) // 2


@kernel
def pop_due(L: Links, B: Buckets) -> int:
    """The link whose entry comes first on the queue of links, taken off it, and whose
    entry is current and next end not later (-1: none). A link whose next end moved
    later (a bucket drained since by a collective's bytes) goes back on the queue."""
    while L.counts[HEAP]:
        t, version, k = L.heap_t[0], L.heap_v[0], index(L.heap_k[0])
        n = L.counts[HEAP] - 1
        L.counts[HEAP] = n
        swap(L, 0, n)
        x = 0
        while True:
            low = x
            for c in (2 * x + 1, 2 * x + 2):
                if c < n and earlier(L, c, low):
                    low = c
            if low == x:
                break
            swap(L, x, low)
            x = low
        if version != L.li[k, VERSION]:
            continue
        if serve(L, B, k, False) > t:
            due(L, B, k)
            continue
        return k
    return -1
