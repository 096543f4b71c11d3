"""An emulated cluster: K network namespaces ("nodes") on a bridge, shaped uplinks.

Layout of one run (``<id>`` is unique per run, see :mod:`commlens.netem.iproute`)::

    host:  bridge cl<id>br ── veth cl<id>h0 ─┐  ... ── veth cl<id>h<K-1> ─┐
    node k (netns commlens-<id>-n<k>):       └─ cl<id>n<k>  10.A.B.(k+1)/24, lo

Each node's link is shaped with tbf in both directions: on the node side
(egress = uplink) and on the bridge side (egress = downlink), so a node sends
and receives at ``link`` at most, full duplex, like a NIC, and drops nothing
(a deep queue, see ``_MIN_QUEUE_BYTES``). Ranks of one node
reach each other through the node's own addresses, which the kernel routes
over loopback: intra-node traffic is not shaped and never touches the veth.
The bridge has no address on the host, so a run's subnet cannot clash with
the host's networks; each run still gets its own /24.

Every object is named in the run's record (:mod:`commlens.netem.state`)
before it is created, and teardown removes what the record lists: so a crash
halfway through setup leaves nothing unaccounted for, and nothing commlens did
not make is ever touched. Teardown runs on normal exit, on a failure during
setup, on exceptions (SIGTERM is turned into
KeyboardInterrupt while the cluster is up) and, if this process dies without
running it (SIGKILL), from a small reaper process that waits for our end of a
pipe to close. Ranks left inside a node are killed before its namespace goes.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from commlens.errors import UsageError
from commlens.launch import RankPlacement
from commlens.netem import iproute
from commlens.netem.rate import format_rate, parse_rate
from commlens.netem.state import RunRecord, claim_run
from commlens.netem.teardown import remove_recorded

# The shaper's bucket: 4 ms worth of tokens, at least a few full-size frames. A
# small bucket keeps the link honest for small messages (no line-rate burst);
# below ~1 ms the timer-driven refill falls behind on a busy machine and a
# 1 Gbit/s link delivers a third of its rate; 4 ms holds ~95% under a load of
# 10 on 2 cores.
BURST_S = 0.004
MIN_BURST_BYTES = 8 * 1514
# The queue: 50 ms of the rate, and never less than _MIN_QUEUE_BYTES (the send
# windows of a few sockets: Linux's tcp_wmem maximum is 4 MiB), so the link
# drops nothing, as a lossless fabric (InfiniBand, RoCE with PFC). 50 ms alone
# hold 125 KB at 20 Mbit/s, less than one step of a 564 KB ring all-reduce
# (141 KB sent at once): the link dropped 16 of 9,000 packets.
_QUEUE_S = 0.05
_MIN_QUEUE_BYTES = 16 << 20
# Packets under 128 bytes (TCP's pure ACKs) go ahead of the queue (an htb
# under the tbf that only orders: on its own, shaping, htb held 64 KB messages
# up to 40 ms at random). A link without propagation delay leaves the hosts'
# TCP (BBR here) few packets in flight, and an ACK queued behind the other
# direction's data stalls its sender. 4-rank ring all-reduce and ring shift,
# one FIFO -> ACKs first, wire times at the rate: 564 KB at 20 Mbit/s 387 ->
# 361 ms (349), 1 MB 739 -> 669 ms (649), 4 MB at 50 Mbit/s 1112 -> 1068 ms
# (1038); a 64 KB send-receive at 50 Mbit/s 14.2 -> 11.3 ms (10.8).
SHAPING = "tbf (both directions per node; packets under 128 bytes first, by htb)"
"""How an emulated link is shaped, as the run's manifest says."""
SHAPED_EFFICIENCY = 0.97
"""Share of an emulated link's rate that transfers reach: 64 MiB all-reduces between
2 ranks over tbf at 2, 1 and 0.5 Gbit/s moved 1.92, 0.98 and 0.49 Gbit/s, stable to 1%
(docs/conventions.md §4)."""
_MAX_NODES = 254  # hosts of the run's /24


def burst_bytes(rate_bits: float) -> int:
    """Bytes of the bucket of an emulated link of ``rate_bits``."""
    return max(int(rate_bits / 8 * BURST_S), MIN_BURST_BYTES)


class EmulatedCluster:
    """Context manager that builds the namespaces and links, and removes them."""

    def __init__(self, nodes: int, link: str | None = None, *, mtu: int = 1500) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        self.nodes = nodes
        self.link = link
        self.rate_bits = parse_rate(link) if link else None
        self.mtu = mtu
        self.run_id = ""
        self.addrs: list[str] = []
        self._subnet: ipaddress.IPv4Network | None = None
        self._record: RunRecord | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._old_sigterm: Any = None
        self._up = False

    # -- public API -------------------------------------------------------------
    @property
    def master_addr(self) -> str:
        """Node 0's address: reachable from every node, where rank 0 listens."""
        return self.addrs[0]

    def namespace(self, node: int) -> str:
        return iproute.namespace_name(self.run_id, node)

    def host_ifaces(self) -> list[str]:
        """Bridge-side veth of each node, in node order (their counters = the node's NIC)."""
        return [iproute.host_veth(self.run_id, k) for k in range(self.nodes)]

    def placement(self, rank: int, node: int) -> RankPlacement:
        """Run ``rank`` in node ``node``'s namespace; gloo/NCCL use the node's veth."""
        iface = iproute.node_veth(self.run_id, node)
        env = {
            "GLOO_SOCKET_IFNAME": iface,
            "NCCL_SOCKET_IFNAME": iface,
            "MASTER_ADDR": self.master_addr,
            "COMMLENS_NODE": str(node),
        }
        return RankPlacement(
            node=node, prefix=("ip", "netns", "exec", self.namespace(node)), env=env
        )

    def describe(self) -> dict[str, Any]:
        """Topology and link, for the run manifest."""
        return {
            "kind": "emulated",
            "nodes": self.nodes,
            "link": format_rate(self.rate_bits) if self.rate_bits else None,
            "link_bits_per_s": self.rate_bits,
            "shaping": SHAPING if self.rate_bits else "none",
            "burst_bytes": self._burst_bytes() if self.rate_bits else None,
            "queue_limit_bytes": self._queue_bytes() if self.rate_bits else None,
            "mtu": self.mtu,
            "run_id": self.run_id,
            "subnet": str(self._subnet) if self._subnet else None,
            "node_addrs": list(self.addrs),
            "namespaces": [self.namespace(k) for k in range(self.nodes)],
            "host_ifaces": self.host_ifaces(),
            "intra_node": "loopback (unshaped)",
        }

    # -- lifecycle --------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        iproute.require_netns("an emulated link (--link/--nodes)")
        if self.nodes > _MAX_NODES:
            raise UsageError(f"--nodes {self.nodes}: an emulated cluster has at most {_MAX_NODES}")
        self._record = self._claim_run_id()
        self.run_id = self._record.run_id
        self._up = True
        try:
            self._reaper = subprocess.Popen(
                [sys.executable, "-m", "commlens.netem.reaper", self.run_id],
                stdin=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C to our process group must not kill it
            )
            self._trap_sigterm()
            self._subnet = _pick_subnet(self.run_id)
            hosts = list(self._subnet.hosts())
            self.addrs = [str(hosts[k]) for k in range(self.nodes)]
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Remove every namespace and interface this run made (idempotent).

        What cannot be removed stays in the run's record, for the reaper and
        ``commlens net cleanup`` to retry; a warning names it.
        """
        if not self._up:
            return
        self._up = False
        try:
            if self._record is not None:
                failed = remove_recorded(self._record).failed
                if failed:
                    warnings.warn(
                        f"could not remove {', '.join(failed)}; `commlens net cleanup` retries",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        finally:
            if self._reaper is not None and self._reaper.stdin is not None:
                self._reaper.stdin.close()  # the reaper finds nothing left and exits
                try:
                    self._reaper.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            self._restore_sigterm()

    # -- internals --------------------------------------------------------------
    def _claim_run_id(self) -> RunRecord:
        """A fresh run id, held by our record, that names nothing on this host yet."""
        for _ in range(1000):
            run_id = secrets.token_hex(3)
            if run_id in iproute.run_ids_present():
                continue
            try:
                return claim_run(run_id, os.getpid())
            except FileExistsError:  # another run holds it (or held it and left a record)
                continue
        raise iproute.IpError("no free id for an emulated run")

    def _create(self, kind: str, name: str, args: list[str]) -> None:
        """Record ``name`` in the run's record, then create it with ``args``."""
        assert self._record is not None
        exists = (
            name in iproute.list_namespaces()
            if kind == "namespaces"
            else name in iproute.list_interfaces()
        )
        if exists:  # not ours: keep it out of the record so teardown leaves it
            raise iproute.IpError(f"{name} already exists and is not this run's; not touching it")
        self._record.add(kind, name)
        iproute.run(args)

    def _queue_bytes(self) -> int:
        """The data queue's limit in bytes: the bucket plus the queue (32-bit: rate.py's
        bound)."""
        assert self.rate_bits is not None
        queue = max(int(self.rate_bits / 8 * _QUEUE_S), _MIN_QUEUE_BYTES)
        return queue + self._burst_bytes()

    def _burst_bytes(self) -> int:
        assert self.rate_bits is not None
        return burst_bytes(self.rate_bits)

    def _build(self) -> None:
        run = iproute.run
        assert self._subnet is not None
        bridge = iproute.bridge_name(self.run_id)
        self._create("bridges", bridge, ["ip", "link", "add", bridge, "type", "bridge"])
        run(["ip", "link", "set", bridge, "mtu", str(self.mtu), "up"])
        for k in range(self.nodes):
            ns, host, node = self.namespace(k), *self._veths(k)
            self._create("namespaces", ns, ["ip", "netns", "add", ns])
            mtu = ["mtu", str(self.mtu)]
            veth = ["ip", "link", "add", host, *mtu, "type", "veth", "peer", "name", node]
            self._create("veths", host, [*veth, "netns", ns])
            run(["ip", "link", "set", host, "master", bridge, "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            cidr = f"{self.addrs[k]}/{self._subnet.prefixlen}"
            run(["ip", "-n", ns, "addr", "add", cidr, "dev", node])
            run(["ip", "-n", ns, "link", "set", node, "up"])
            if self.rate_bits:
                self._shape(host, None)
                self._shape(node, ns)
        self._wait_carrier()

    def _veths(self, node: int) -> tuple[str, str]:
        return iproute.host_veth(self.run_id, node), iproute.node_veth(self.run_id, node)

    def _shape(self, iface: str, ns: str | None) -> None:
        """Shape ``iface``'s egress: tbf at the link's rate, and under it an htb that only
        orders (its classes ten times faster than the link): packets under 128 bytes (TCP's
        pure ACKs) first, the rest in a deep FIFO (``_MIN_QUEUE_BYTES``)."""
        assert self.rate_bits is not None
        tc = [*(["ip", "netns", "exec", ns] if ns else []), "tc"]
        dev = ["dev", iface]
        rate, burst, limit = format_rate(self.rate_bits), self._burst_bytes(), self._queue_bytes()
        tbf = ["tbf", "rate", rate, "burst", str(burst), "limit", str(limit)]
        iproute.run([*tc, "qdisc", "add", *dev, "root", "handle", "1:", *tbf])
        iproute.run(
            [*tc, "qdisc", "add", *dev, "parent", "1:1", "handle", "2:", "htb", "default", "20"]
        )
        fast = format_rate(10 * self.rate_bits)
        for leaf, prio in (("2:10", "0"), ("2:20", "1")):
            order = ["classid", leaf, "htb", "rate", fast, "burst", str(burst), "prio", prio]
            iproute.run([*tc, "class", "add", *dev, "parent", "2:", *order])
        iproute.run([*tc, "qdisc", "add", *dev, "parent", "2:20", "bfifo", "limit", str(limit)])
        small = ["u32", "match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "2:10"]
        iproute.run([*tc, "filter", "add", *dev, "parent", "2:", "protocol", "ip", *small])

    def _wait_carrier(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for iface in self.host_ifaces():
            path = Path("/sys/class/net") / iface / "operstate"
            while path.read_text().strip() not in ("up", "unknown"):
                if time.monotonic() > deadline:
                    raise iproute.IpError(f"{iface} did not come up")
                time.sleep(0.01)

    def _trap_sigterm(self) -> None:
        def _raise(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        try:
            self._old_sigterm = signal.signal(signal.SIGTERM, _raise)
        except ValueError:  # not the main thread: the reaper still has our back
            self._old_sigterm = None

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None:
            try:
                signal.signal(signal.SIGTERM, self._old_sigterm)
            except ValueError:
                pass
            self._old_sigterm = None


def _pick_subnet(run_id: str) -> ipaddress.IPv4Network:
    """A /24 in 10.128.0.0/9 from the run id, avoiding the host's own networks."""
    taken = _host_networks()
    rng = random.Random(run_id)
    for _ in range(1000):
        net = ipaddress.IPv4Network((0x0A800000 | (rng.randrange(1 << 15) << 8), 24))
        if not any(net.overlaps(other) for other in taken):
            return net
    raise iproute.IpError("no free /24 in 10.128.0.0/9")


def _host_networks() -> list[ipaddress.IPv4Network]:
    out = iproute.run(["ip", "-j", "-4", "addr"], check=False) or "[]"
    nets = []
    for link in json.loads(out):
        for info in link.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
    return nets
