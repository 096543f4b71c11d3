"""Ops sharing a link in the replay: p2p rendezvous and eager sends, a node's link
carrying one message at a time, gloo's two workers per group (µs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from commlens.optable import GLOO
from commlens.predict.profiles import NetworkProfile, get_profile
from commlens.predict.topology import Fabric
from commlens.whatif.backend import GLOO_REPLAY
from commlens.whatif.costing import Steps, modelled, node_links, wire_pair, wire_times
from commlens.whatif.durations import link_waits, measured, measured_release, worker_waits
from commlens.whatif.model import build_program
from commlens.whatif.optimes import Bucket, LinkUse, OpTimes
from commlens.whatif.replay import replay
from tests.whatif.synthetic import Ev, both_steps, make_trace, us


def test_a_send_that_outlasted_its_receives_issue_waits_for_the_receive() -> None:
    # rank 0's send (issued at 0) ended at 10, after rank 1 posted its receive at 8:
    # gloo moved the data once the receive was posted, so the pair meets at 8.
    events = [
        Ev(0, "send", 0, 10, peer=1, role="pp"),
        Ev(1, "recv", 8, 10, peer=0, role="pp"),
    ]
    prog = build_program(make_trace(events, both_steps(10)))
    assert prog.rendezvous.tolist() == [True]
    assert measured(prog).tolist() == [us(2), us(2)]  # from the receive's issue
    exact = replay(prog, OpTimes(measured(prog), measured_release(prog)))
    assert exact.end.tolist() == [us(10), us(10)]
    tl = replay(prog, OpTimes(np.full(2, 1e-6)))
    assert tl.start.tolist() == [us(8)] and tl.end.tolist() == [us(9), us(9)]
    assert tl.by.tolist() == [1]  # the receive came last


def test_a_send_that_ended_before_its_receive_was_issued_stays_eager() -> None:
    events = [
        Ev(0, "send", 0, 1, peer=1, role="pp"),
        Ev(1, "recv", 8, 9, peer=0, role="pp"),
    ]
    prog = build_program(make_trace(events, both_steps(9)))
    assert prog.rendezvous.tolist() == [False]
    tl = replay(prog, OpTimes(np.full(2, 1e-6)))
    assert tl.start.tolist() == [us(0)] and tl.end.tolist() == [us(1), us(8)]


def one_f_one_b(a2_posted: float = 20) -> list[Ev]:
    """Stage 0 (rank 0) sends activation A1 to stage 1 (rank 1), then in one batch at 5
    sends A2 and posts its receive of gradient G1; rank 1 computes on A1 and at 20
    (``a2_posted``) sends G1 back and posts its receive of A2. gloo moves a message once
    its receiver said it is ready: rank 1's notice for A2 went on their connection
    behind G1's bytes, which arrived at 30, so A2 moved 30..40 (its send ended at 30,
    once its bytes were in the socket)."""
    return [
        Ev(0, "send", 0, 1, peer=1, role="pp"),  # A1
        Ev(0, "send", 5, 30, peer=1, role="pp", is_async=True, wait=25),  # A2
        Ev(0, "recv", 5, 30, peer=1, role="pp", is_async=True, wait=25),  # G1
        Ev(1, "recv", 0, 10, peer=0, role="pp"),  # A1
        Ev(1, "send", 20, 21, peer=0, role="pp", is_async=True, wait=1),  # G1
        Ev(1, "recv", a2_posted, 40, peer=0, role="pp", is_async=True, wait=40 - a2_posted),
    ]


def test_a_receivers_ready_notice_follows_the_message_it_sent_back_first() -> None:
    prog = build_program(make_trace(one_f_one_b(), [(0, 0, 0, 30), (1, 0, 0, 40)]))
    a1, a2, g1 = 0, 1, 2  # pairs in channel order: 0 -> 1, then 1 -> 0
    assert [prog.trace.rank[prog.send_of[i]] for i in (a1, a2, g1)] == [0, 0, 1]
    # A2's notice may follow G1 and did; G1's may follow A2, which had not started
    assert prog.reverse.tolist() == [-1, g1, a2]
    assert prog.behind.tolist() == [False, True, False]
    took = measured(prog)
    # A2 started at G1's arrival (30), not at its receive's posting (20)
    assert took[[prog.send_of[a2], prog.recv_of[a2]]].tolist() == [us(0), us(10)]
    exact = replay(prog, OpTimes(measured(prog), measured_release(prog)))
    assert exact.end.tolist() == pytest.approx((prog.trace.t_end / 1e9).tolist(), abs=1e-12)
    # every receive 20 us (a slower link), every send 1 us: A1 arrives at 20, rank 1
    # sends G1 at 30 (its 10 us of compute), G1 arrives at 50, and only then A2 moves
    dur = np.where(np.isin(np.arange(6), prog.recv_of), 20e-6, 1e-6)
    tl = replay(prog, OpTimes(dur))
    assert tl.start.tolist() == [us(0), us(50), us(30)]
    assert tl.end[prog.recv_of[a2]] == pytest.approx(us(70))
    assert tl.end[prog.send_of[a2]] == pytest.approx(us(51))


def test_a_ready_notice_sent_before_the_message_back_does_not_wait_for_it() -> None:
    # rank 1 posts its receive of A2 at 12, before it sends G1 (20): nothing is ahead of
    # its notice, and A2 starts at 12
    prog = build_program(make_trace(one_f_one_b(a2_posted=12), [(0, 0, 0, 30), (1, 0, 0, 40)]))
    assert prog.reverse.tolist() == [-1, -1, 1] and not prog.behind.any()
    assert measured(prog)[prog.recv_of[1]] == pytest.approx(us(28))


def two_stage_sends() -> tuple[list[Ev], list[tuple[int, int, float, float]]]:
    """Ranks 0 and 1 (node 0) send to 2 and 3 (node 1) at once; the link carried the
    first message by 10 and the second by 20."""
    events = [
        Ev(0, "send", 0, 10, peer=2, role="pp"),
        Ev(1, "send", 0, 20, peer=3, role="pp"),
        Ev(2, "recv", 0, 10, peer=0, role="pp"),
        Ev(3, "recv", 0, 20, peer=1, role="pp"),
    ]
    return events, [(r, 0, 0, 20) for r in range(4)]


def fabric() -> Fabric:
    return Fabric(inter=get_profile("loopback"), intra=get_profile("loopback"), gpus_per_node=2)


def test_messages_of_two_channels_that_come_together_share_a_links_rate() -> None:
    # ranks 0 and 1 (node 0) send 10 us of wire each to 2 and 3 (node 1), both at 0: the
    # shaper's queue interleaves the two sockets' packets, so both arrive at 20 (one
    # after the other, as the replay had them before, they arrived at 10 and 20)
    prog = build_program(make_trace(*two_stage_sends()))
    links = node_links(prog, fabric())
    assert links.tolist() == [0, 0]
    tl = replay(prog, OpTimes(np.full(4, 10e-6), use=LinkUse(1, links=links)))
    assert tl.end[prog.recv_of].tolist() == pytest.approx([us(20), us(20)], abs=1e-12)
    # a send ends once its bytes are in the socket, without waiting for the link
    assert tl.end[prog.send_of].tolist() == [us(10), us(10)]
    assert sorted(replay(prog, OpTimes(np.full(4, 10e-6))).end.tolist()) == [us(10)] * 4
    # the wire is what the link shares, not the receive's host time: 4 us of wire each
    # (8 together) and 6 us of host after it, 14 us
    use = LinkUse(GLOO.workers, links=links, wire=np.full(2, 4e-6))
    tl = replay(prog, OpTimes(np.full(4, 10e-6), use=use))
    assert tl.end[prog.recv_of].tolist() == pytest.approx([us(14), us(14)], abs=1e-12)


def test_messages_cross_a_link_in_the_order_they_came_not_as_the_replay_reached_them() -> None:
    # rank 1 sends at 3 and rank 0 at 5, each to a receive posted at 0 on the other
    # node (10 us of wire each); the replay reaches rank 0's send first. The shaper's
    # queue has rank 1's bytes first: it arrives at 13, rank 0's at 23 (before, the
    # message reached first went first: 5..15, then 15..25)
    def ends(first: int) -> list[float]:
        sender = {0: 5.0, 1: 3.0} if first == 0 else {0: 3.0, 1: 5.0}
        events = [
            Ev(0, "send", sender[0], sender[0] + 1, peer=2, role="pp"),
            Ev(1, "send", sender[1], sender[1] + 1, peer=3, role="pp"),
            Ev(2, "recv", 0, 30, peer=0, role="pp"),
            Ev(3, "recv", 0, 30, peer=1, role="pp"),
        ]
        prog = build_program(make_trace(events, [(r, 0, 0, 30) for r in range(4)]))
        use = LinkUse(1, links=node_links(prog, fabric()))
        tl = replay(prog, OpTimes(np.full(4, 10e-6), use=use))
        by_rank = dict(zip(prog.trace.rank.tolist(), tl.end.tolist(), strict=True))
        return [by_rank[2], by_rank[3]]

    assert ends(0) == pytest.approx([us(23), us(13)], abs=1e-12)
    assert ends(1) == pytest.approx([us(13), us(23)], abs=1e-12)


def test_a_channels_messages_follow_each_other_on_a_shared_link() -> None:
    # rank 0 sends A1 and A2 to rank 2 at once (one socket), rank 1 sends B to rank 3:
    # 10 us of wire each. A1 and B share the link and arrive at 20; A2, put on its
    # channel at 10 (after A1's 10 us), crosses after them, 20..30
    events = [
        Ev(0, "send", 0, 1, peer=2, role="pp", is_async=True, wait=1),
        Ev(0, "send", 0, 1, peer=2, role="pp", is_async=True, wait=1),
        Ev(1, "send", 0, 1, peer=3, role="pp"),
        Ev(2, "recv", 0, 20, peer=0, role="pp"),
        Ev(2, "recv", 0, 30, peer=0, role="pp"),
        Ev(3, "recv", 0, 20, peer=1, role="pp"),
    ]
    prog = build_program(make_trace(events, [(r, 0, 0, 30) for r in range(4)]))
    tl = replay(prog, OpTimes(np.full(6, 10e-6), use=LinkUse(1, links=node_links(prog, fabric()))))
    recvs = {
        (int(prog.trace.rank[r]), round(float(prog.trace.t_end[r]) / 1e3)): float(tl.end[r])
        for r in prog.recv_of.tolist()
    }
    assert recvs == pytest.approx({(2, 20): us(20), (2, 30): us(30), (3, 20): us(20)}, abs=1e-12)


def test_messages_that_open_a_busy_spell_together_split_the_buckets_credit() -> None:
    # the two sends of two_stage_sends with 12 us of wire each and a bucket of 4 us on
    # node 0's link (a message that finds it full: 8 us): each takes half the credit,
    # and the link carries the 20 us left side by side, both arriving at 20 (one
    # after the other: 8, then 8 + 12 = 20)
    prog = build_program(make_trace(*two_stage_sends()))
    links = node_links(prog, fabric())
    nodes = [(0,) if len(g) == 2 and g[0] < 2 <= g[1] else () for g in prog.cost_groups]
    bucket = Bucket(4e-6, np.full(2, 12e-6), np.full(2, 4e-6), nodes)
    use = LinkUse(1, links=links, wire=np.full(2, 8e-6), bucket=bucket)
    recv = np.isin(np.arange(4), prog.recv_of)
    times = OpTimes(np.where(recv, 8e-6, 1e-6), use=use, drained=np.where(recv, 12e-6, 1e-6))
    tl = replay(prog, times)
    assert tl.end[prog.recv_of].tolist() == pytest.approx([us(20), us(20)], abs=1e-12)
    # each on a link of its own, each finds a full bucket (8)
    apart = list(nodes)
    for k, g in enumerate(prog.inst_group.tolist()):
        apart[g] = (k,)
    own = replace(use, links=np.array([0, 1], np.int32), bucket=replace(bucket, nodes=apart))
    alone = replay(prog, replace(times, use=own))
    assert alone.end[prog.recv_of].tolist() == pytest.approx([us(8), us(8)], abs=1e-12)


def test_a_ready_notice_follows_a_message_back_that_shares_its_link() -> None:
    # one_f_one_b twice, side by side on 2 nodes: pipeline 0 -> 2 and pipeline 1 -> 3.
    # Every receive 20 us, every send 1 us, as in the single pipeline's test (there A2
    # arrived at 70): A1 and A1' come together on node 0's link and arrive at 40, G1 and
    # G1' are sent back at 50 and arrive together at 90, and only then do A2 and A2'
    # move (their notices behind G1 and G1'), arriving at 130
    def ranks(a: int, b: int) -> list[Ev]:
        return [replace(e, rank=(a, b)[e.rank], peer=(a, b)[e.peer]) for e in one_f_one_b()]

    events = ranks(0, 2) + ranks(1, 3)
    windows = [(r, 0, 0, 30 if r < 2 else 40) for r in range(4)]
    prog = build_program(make_trace(events, windows))
    assert prog.behind.sum() == 2
    links = node_links(prog, fabric())
    dur = np.where(np.isin(np.arange(prog.inst.size), prog.recv_of), 20e-6, 1e-6)
    tl = replay(prog, OpTimes(dur, use=LinkUse(1, links=links)))
    rank = prog.trace.rank
    a2 = np.flatnonzero(prog.behind).tolist()
    assert sorted(rank[prog.send_of[a2]].tolist()) == [0, 1]
    assert tl.start[a2].tolist() == pytest.approx([us(90)] * 2, abs=1e-12)
    assert tl.end[prog.recv_of[a2]].tolist() == pytest.approx([us(130)] * 2, abs=1e-12)


def test_the_fit_takes_a_messages_wait_for_its_link_out_of_its_time() -> None:
    prog = build_program(make_trace(*two_stage_sends()))
    waits = link_waits(prog, node_links(prog, fabric()))
    recvs = prog.recv_of.tolist()
    # the second message came at 20, 10 after the first had arrived: 10 on the wire
    assert sorted(waits[recvs].tolist()) == [0.0, us(10)]
    assert waits[prog.send_of].tolist() == [0.0, 0.0]
    assert sorted((measured(prog) - waits)[recvs].tolist()) == [us(10), us(10)]
    one_node = Fabric(inter=get_profile("loopback"), intra=get_profile("loopback"), gpus_per_node=4)
    assert not link_waits(prog, node_links(prog, one_node)).any()


def test_messages_that_crossed_the_link_side_by_side_each_keep_their_share_of_it() -> None:
    # ranks 0 and 1 send to 2 and 3 at 0 and at 1 (different sockets): the shaper
    # carried both side by side and they arrived at 19 and 20; the link was busy 20 for
    # 2 KB and 1 KB. Counted after the one ahead, the first would keep 19 on the wire
    # and the second 1.
    events = [
        Ev(0, "send", 0, 1, peer=2, role="pp", size=2048),
        Ev(1, "send", 1, 2, peer=3, role="pp"),
        Ev(2, "recv", 0, 19, peer=0, role="pp", size=2048),
        Ev(3, "recv", 0, 20, peer=1, role="pp"),
    ]
    prog = build_program(make_trace(events, [(r, 0, 0, 20) for r in range(4)]))
    waits = link_waits(prog, node_links(prog, fabric()))
    recvs = prog.recv_of.tolist()
    wire = (measured(prog) - waits)[recvs]
    assert wire.tolist() == pytest.approx([us(40 / 3), us(20 / 3)])
    assert waits[recvs].tolist() == pytest.approx([us(19 - 40 / 3), us(19 - 20 / 3)])
    # a message that started after the link had gone idle opens a spell of its own
    events[1], events[3] = (
        Ev(1, "send", 25, 26, peer=3, role="pp"),
        Ev(3, "recv", 0, 30, peer=1, role="pp"),
    )
    prog = build_program(make_trace(events, [(r, 0, 0, 30) for r in range(4)]))
    assert not link_waits(prog, node_links(prog, fabric())).any()


def test_messages_on_different_links_or_inside_a_node_do_not_wait() -> None:
    prog = build_program(make_trace(*two_stage_sends()))
    one_node = Fabric(inter=get_profile("loopback"), intra=get_profile("loopback"), gpus_per_node=4)
    links = node_links(prog, one_node)
    assert links.tolist() == [-1, -1]
    assert (
        replay(prog, OpTimes(np.full(4, 10e-6), use=LinkUse(1, links=links))).end.tolist()
        == [us(10)] * 4
    )
    two_nics = Fabric(
        inter=get_profile("loopback"),
        intra=get_profile("loopback"),
        gpus_per_node=2,
        nics_per_node=2,
    )
    assert node_links(prog, two_nics).tolist() == [-1, -1]


def test_a_message_that_starts_after_the_link_is_free_again_does_not_wait() -> None:
    events = [
        Ev(0, "send", 0, 10, peer=2, role="pp"),
        Ev(1, "send", 15, 25, peer=3, role="pp"),
        Ev(2, "recv", 0, 10, peer=0, role="pp"),
        Ev(3, "recv", 15, 25, peer=1, role="pp"),
    ]
    prog = build_program(make_trace(events, [(r, 0, 0, 25) for r in range(4)]))
    links = node_links(prog, fabric())
    tl = replay(prog, OpTimes(np.full(4, 10e-6), use=LinkUse(1, links=links)))
    assert tl.start.tolist() == [us(0), us(15)]


def concurrent_buckets() -> list[Ev]:
    """Three async all-reduces each rank issues at 0, 1 and 2 (a DDP backward's buckets)."""
    return [
        Ev(r, "all_reduce", t, t + 10 * (k + 1), is_async=True)
        for r in (0, 1)
        for k, t in enumerate((0.0, 1.0, 2.0))
    ]


def test_a_gloo_group_runs_two_ops_at_once_the_later_ones_bytes_after_the_earlier_ones() -> None:
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    dur, wire = np.full(6, 10e-6), np.full(3, 8e-6)
    one = replay(prog, OpTimes(dur))
    assert one.start.tolist() == [us(0), us(10), us(20)]  # one worker: one after the other
    two = replay(prog, OpTimes(dur, use=LinkUse(GLOO.workers, wire=wire)))
    # B starts on the second worker at 1 and ends when its bytes followed A's, which
    # held the link until A's release (0..10): at 18; C waits for a worker (A frees
    # one at 10) and its bytes follow B's (1..18): 26.
    assert two.start.tolist() == [us(0), us(1), us(10)]
    assert sorted(set(two.end.tolist())) == [us(10), us(18), us(26)]
    # fewer bytes: B's follow A's release at 10 (14); C's follow B's (10..14), C ends at
    # its own time (20)
    short = replay(prog, OpTimes(dur, use=LinkUse(GLOO.workers, wire=np.full(3, 4e-6))))
    assert sorted(set(short.end.tolist())) == [us(10), us(14), us(20)]
    alone = replay(prog, OpTimes(dur, use=LinkUse(GLOO.workers, wire=np.zeros(3))))
    assert sorted(set(alone.end.tolist())) == [us(10), us(11), us(20)]


def test_an_op_whose_bytes_follow_anothers_gets_no_credit_from_the_links_bucket() -> None:
    # a shaped link lets 4 of each op's 8 wire through at once after an idle spell;
    # B's bytes follow A's on the busy link, which did not refill the bucket: B pays
    # its whole 8 after A's release at 10 (18), not 4 (14), and C after B's (26)
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    dur = np.full(6, 10e-6)
    use = LinkUse(GLOO.workers, wire=np.full(3, 4e-6), queued_wire=np.full(3, 8e-6))
    tl = replay(prog, OpTimes(dur, use=use))
    assert sorted(set(tl.end.tolist())) == [us(10), us(18), us(26)]

    # from an idle link the credit holds: an op alone ends at its own time
    events = [Ev(r, "all_reduce", t, t + 10, is_async=True) for r in (0, 1) for t in (0, 30)]
    prog = build_program(make_trace(events, both_steps(40)))
    use = LinkUse(GLOO.workers, wire=np.full(2, 4e-6), queued_wire=np.full(2, 8e-6))
    tl = replay(prog, OpTimes(np.full(4, 10e-6), use=use))
    assert sorted(set(tl.end.tolist())) == [us(10), us(40)]
    # and no member ends before its op's bytes crossed the idle link: a member given
    # 2 (a late member's lag taken off, say) still ends 4 after the start
    dur = np.full(4, 10e-6)
    dur[np.flatnonzero(prog.inst == 0)[0]] = 2e-6
    tl = replay(prog, OpTimes(dur, use=use))
    assert sorted(tl.end[prog.inst == 0].tolist()) == [us(4), us(10)]


def test_back_to_back_ops_drain_the_links_bucket_and_an_idle_link_refills_it() -> None:
    # 3 blocking all-reduces of 2 ranks on 2 nodes: 12 us of wire each, a bucket of 4 us
    # (its credit 4: 10 us an op with the bucket full, 14 with it empty)
    events = [Ev(r, "all_reduce", t, t + 10) for r in (0, 1) for t in (0, 10, 50)]
    prog = build_program(make_trace(events, both_steps(70)))
    bucket = Bucket(4e-6, np.full(3, 12e-6), np.full(3, 4e-6), [(0, 1)] * len(prog.cost_groups))
    use = LinkUse(GLOO.workers, wire=np.full(3, 8e-6), queued_wire=np.full(3, 12e-6), bucket=bucket)
    times = OpTimes(np.full(6, 10e-6), use=use, drained=np.full(6, 14e-6))
    tl = replay(prog, times)
    # A takes the full bucket (its bytes leave by 8); B, issued at 10, finds 2 us of it
    # refilled since: half its credit, 12 us (22); C, after 30 us idle, a full one (62)
    assert sorted(set(tl.end.tolist())) == [us(10), us(22), us(62)]
    # as before the level was kept, every op finding the bucket full
    full = replay(prog, OpTimes(np.full(6, 10e-6), use=replace(use, bucket=None)))
    assert sorted(set(full.end.tolist())) == [us(10), us(20), us(60)]


def test_a_shaped_links_wire_without_its_bucket_is_the_whole_wire_time() -> None:
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    wire = NetworkProfile("wire", latency_s=0.0, bandwidth_Gbps=8e-3, efficiency=1.0)
    spread = Fabric(inter=wire, intra=get_profile("loopback"), gpus_per_node=1)
    credited, whole = wire_pair(prog, spread, prog.cost_groups, 512.0)
    assert whole is not None
    assert whole.tolist() == [us(1024)] * 3
    veth = 512 * get_profile("loopback").beta("all_reduce") * 1e6  # us
    assert credited.tolist() == [us(512 + veth)] * 3  # the bucket's 512 B at the veth's rate
    assert wire_pair(prog, spread, prog.cost_groups, 0.0)[1] is None


def test_the_self_check_stays_exact_for_ops_that_ran_beside_each_other() -> None:
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    tl = replay(prog, OpTimes(measured(prog), measured_release(prog)))
    assert tl.end.tolist() == pytest.approx((prog.trace.t_end / 1e9).tolist(), abs=1e-12)


def test_an_op_that_ended_before_the_one_ahead_still_shares_the_workers_and_the_link() -> None:
    # B (issued at 1) ended at 10, before A (20): it ran on the second worker
    events = [
        Ev(r, "all_reduce", t, end, is_async=True) for r in (0, 1) for t, end in ((0, 20), (1, 10))
    ]
    prog = build_program(make_trace(events, both_steps(20)))
    assert prog.first_of_queue.tolist() == [True, True]
    assert prog.opens_queue.tolist() == [True, False]
    tl = replay(prog, OpTimes(np.full(4, 10e-6), use=LinkUse(GLOO.workers, wire=np.full(2, 8e-6))))
    assert sorted(set(tl.end.tolist())) == [us(10), us(18)]  # its bytes after A's (0..10)


def test_the_fit_takes_a_calls_time_beside_the_next_one_out_of_its_time() -> None:
    # A (issued at 0) and B (issued at 1) ran beside each other on the group's two
    # workers: A ended at 20, B 2 later. Each had 10 of wire: A kept 11 of the spell,
    # B (counted from A's first end, 20) nothing to give
    events = [
        Ev(r, "all_reduce", t, end, is_async=True) for r in (0, 1) for t, end in ((0, 20), (1, 22))
    ]
    prog = build_program(make_trace(events, both_steps(22)))
    waits = worker_waits(prog, np.full(2, 10e-6))
    assert waits.tolist() == pytest.approx([(us(9), 0.0)[i] for i in prog.inst])
    # by wire time: A's bytes three times B's, A keeps three quarters of the spell
    waits = worker_waits(prog, np.array([30e-6, 10e-6]))
    assert waits.tolist() == pytest.approx([(us(3.5), 0.0)[i] for i in prog.inst])
    # three calls issued at 0, 1 and 2 that ended at 10, 21 and 32: a third of the
    # spell each, as their bytes one after the other have them
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    waits = worker_waits(prog, np.full(3, 10e-6))
    assert waits.tolist() == pytest.approx([(0.0, us(1 / 3), us(1 / 3))[i] for i in prog.inst])
    # a call issued once the one ahead had ended does not wait, nor do the pairs of
    # a pipeline
    events = [Ev(r, "all_reduce", t, t + 10, is_async=True) for r in (0, 1) for t in (0, 12)]
    prog = build_program(make_trace(events, both_steps(22)))
    assert not worker_waits(prog, np.full(2, 10e-6)).any()
    prog = build_program(make_trace(*two_stage_sends()))
    assert not worker_waits(prog, np.full(prog.instances, 10e-6)).any()


def test_an_instances_wire_time_leaves_the_step_latency_out() -> None:
    # 1 MB/s between two nodes: a 2-rank ring all-reduce of 1024 B moves 1024 B per rank
    prog = build_program(make_trace(concurrent_buckets(), both_steps(40)))
    wire = NetworkProfile("wire", latency_s=0.0, bandwidth_Gbps=8e-3, efficiency=1.0)
    spread = Fabric(inter=wire, intra=get_profile("loopback"), gpus_per_node=1)
    assert wire_times(prog, spread, prog.cost_groups, 0.0).tolist() == [us(1024)] * 3
    slow_host = Steps(default_latency_s=1e-3)  # its 2 steps of 1 ms and one step's wire
    assert modelled(prog, spread, None, GLOO_REPLAY, slow_host).tolist() == [us(2000 + 512)] * 6


def test_a_links_bucket_is_drained_only_by_the_bytes_that_left_before_an_ops_own() -> None:
    # a pipeline's two pairs of stages on 2 nodes (ranks 0, 1 on node 0; 2, 3 on node 1):
    # 0 sends to 2 at 100 us, 1 to 3 at 0, both leaving by node 0's link (a bucket of
    # 4 us: 12 us of wire each, 8 with the bucket full). The replay reaches rank 0's
    # send first; 1's, which left 100 us before it, still finds the bucket full: its
    # receive ends at 8, not 12 (before, it found the bucket drained by 0's send)
    events = [
        Ev(0, "send", 100, 101, peer=2, role="pp"),
        Ev(2, "recv", 0, 108, peer=0, role="pp"),
        Ev(1, "send", 0, 1, peer=3, role="pp"),
        Ev(3, "recv", 0, 8, peer=1, role="pp"),
    ]
    windows = [(r, 0, 0.0, 110.0) for r in range(4)]
    prog = build_program(make_trace(events, windows))
    # each pair leaves by node 0's link
    nodes = [(0,) if len(g) == 2 and g[0] < 2 <= g[1] else () for g in prog.cost_groups]
    assert nodes.count((0,)) == 2, prog.cost_groups
    bucket = Bucket(4e-6, np.full(2, 12e-6), np.full(2, 4e-6), nodes)
    use = LinkUse(1, wire=np.full(2, 8e-6), bucket=bucket)
    recv = np.isin(np.arange(4), prog.recv_of)
    times = OpTimes(np.where(recv, 8e-6, 1e-6), use=use, drained=np.where(recv, 12e-6, 1e-6))
    tl = replay(prog, times)
    ends = dict(zip(prog.trace.rank.tolist(), tl.end.tolist(), strict=True))
    assert ends[3] == us(8)  # the bucket full at 0
    assert ends[2] == us(108)  # 0's send, 100 us later: refilled since
    # 0 sends again at 9 before 1's bytes left: rank 0 reached first, its bytes find the
    # full bucket; 1's, leaving at 10 behind them, find it drained (its receive at 22)
    events[0] = Ev(0, "send", 9, 10, peer=2, role="pp")
    events[1] = Ev(2, "recv", 0, 17, peer=0, role="pp")
    events[2] = Ev(1, "send", 10, 11, peer=3, role="pp")
    prog = build_program(make_trace(events, windows))
    tl = replay(prog, replace(times, duration=np.where(recv, 8e-6, 1e-6)))
    ends = dict(zip(prog.trace.rank.tolist(), tl.end.tolist(), strict=True))
    assert ends[2] == us(17) and ends[3] == us(22)
