"""The NIC sampler and its file (no root needed: it samples the loopback device)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from commlens.netem.nic import SCHEMA, NicSampler, link_utilization, read_nic, totals


def _send_over_loopback(nbytes: int) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with socket.create_connection(srv.getsockname()) as client:
            conn, _ = srv.accept()
            with conn:
                sender = threading.Thread(target=client.sendall, args=(b"x" * nbytes,))
                sender.start()
                got = 0
                while got < nbytes:
                    got += len(conn.recv(1 << 20))
                sender.join()


@pytest.mark.skipif(not Path("/sys/class/net/lo/statistics").is_dir(), reason="needs Linux sysfs")
def test_sampler_counts_traffic_at_20_hz(tmp_path: Path) -> None:
    out = tmp_path / "nic.parquet"
    with NicSampler(["lo"], out, hz=20):
        time.sleep(0.3)
        _send_over_loopback(4 << 20)
        time.sleep(0.3)
    table = read_nic(tmp_path)
    assert table.schema.equals(SCHEMA)
    assert table.num_rows >= 8  # >= 0.6 s at 20 Hz, with slack for a busy machine
    assert table.column("tx_bytes")[0].as_py() == 0
    tx, rx = totals(table)[0]
    assert tx >= 4 << 20 and rx >= 4 << 20  # lo sees every byte both ways
    t = table.column("t_ns").to_pylist()
    assert t == sorted(t)
    assert not list(tmp_path.glob("*.tmp"))


def test_link_utilization_in_gbit_per_s() -> None:
    rows = [
        (0, 0, "a", 0, 0),
        (100_000_000, 0, "a", 12_500_000, 0),  # 12.5 MB in 0.1 s = 1 Gbit/s
        (0, 1, "b", 0, 0),
        (100_000_000, 1, "b", 0, 6_250_000),
    ]
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)
    util = link_utilization(table)
    assert util == [
        {"t_s": 0.1, "node": 0, "tx_Gbit/s": 1.0, "rx_Gbit/s": 0.0},
        {"t_s": 0.1, "node": 1, "tx_Gbit/s": 0.0, "rx_Gbit/s": 0.5},
    ]
    assert totals(table) == {0: (12_500_000, 0), 1: (0, 6_250_000)}


def test_sampler_rejects_a_bad_rate(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        NicSampler(["lo"], tmp_path / "x.parquet", hz=0)


def test_empty_file_is_valid(tmp_path: Path) -> None:
    sampler = NicSampler([], tmp_path / "nic.parquet")
    sampler.start()
    sampler.stop()
    assert pq.read_table(tmp_path / "nic.parquet").num_rows == 0
