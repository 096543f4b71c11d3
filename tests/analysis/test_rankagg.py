"""Per-rank aggregates and codes against a brute-force Python group-by."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from commlens.analysis.codes import Codes, dense_codes, first_index
from commlens.analysis.rankagg import rank_aggregate, size_bucket


def test_size_bucket_edges() -> None:
    sizes = [0, 1, 2, 3, 4, 1023, 1024, 1025, (1 << 40) - 1, 1 << 40, (1 << 53) + 1]
    want = [0, 1, 2, 2, 4, 512, 1024, 1024, 1 << 39, 1 << 40, 1 << 53]
    assert size_bucket(np.array(sizes, np.int64)).tolist() == want


def test_codes_share_one_mapping_and_handle_nulls() -> None:
    codes = Codes()
    a = codes.encode(pa.array(["x", "y", None, "x"]))
    b = codes.encode(pa.chunked_array([pa.array(["y", "z"]).dictionary_encode()]))
    assert [codes.values[i] for i in a] == ["x", "y", "", "x"]
    assert [codes.values[i] for i in b] == ["y", "z"]


@pytest.mark.parametrize("big", [False, True])
def test_dense_codes_and_first_index(big: bool) -> None:
    values = np.array([5, 3, 5, 9, 3, 3], np.int64) * (1 << 40 if big else 1)
    uniq, inverse = dense_codes(values)
    assert uniq.tolist() == sorted(set(values.tolist()))
    assert (uniq[inverse] == values).all()
    assert first_index(inverse, uniq.size).tolist() == [1, 0, 3]


@pytest.mark.parametrize("stepwise", [False, True])
def test_rank_aggregate_matches_a_python_group_by(
    stepwise: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if stepwise:
        monkeypatch.setattr("commlens.analysis.rankagg.MIXED_RADIX_LIMIT", 1.0)
    rng = np.random.default_rng(1)
    n = 5000
    words = {
        "op": ["all_reduce", "all_gather", "send"],
        "pg_name": [str(i) for i in range(7)],
        "role": ["", "dp", "tp"],
        "phase": ["forward", "backward", "optimizer", "other"],
        "module": [f"layers.{i}.mlp" for i in range(40)] + [""],
    }
    names = {k: Codes() for k in words}
    raw = {k: rng.choice(v, n) for k, v in words.items()}
    codes = {k: names[k].encode(pa.array(raw[k].tolist())) for k in words}
    size = rng.integers(0, 1 << 26, n)
    size[:50] = 0
    duration = rng.random(n)
    wait = rng.integers(0, 10**6, n)
    service = rng.integers(0, 10**6, n)
    table = rank_aggregate(3, names, codes, size, duration, wait, service)
    want: dict[tuple[object, ...], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
    buckets = size_bucket(size)
    for i in range(n):
        key = (
            raw["op"][i],
            raw["pg_name"][i],
            raw["role"][i],
            int(buckets[i]),
            raw["phase"][i],
            raw["module"][i],
        )
        acc = want[key]
        acc[0] += 1
        acc[1] += int(size[i])
        acc[2] += float(duration[i])
        acc[3] += wait[i] / 1e9
        acc[4] += service[i] / 1e9
    got = {
        (r["op"], r["pg_name"], r["role"], r["size_bucket_bytes"], r["phase"], r["module"]): [
            r["count"],
            r["bytes"],
            r["time_s"],
            r["wait_s"],
            r["service_s"],
        ]
        for r in table.to_pylist()
    }
    assert set(table.column("rank").to_pylist()) == {3}
    assert got.keys() == want.keys()
    for key, (count, nbytes, time_s, wait_s, service_s) in want.items():
        assert got[key][4] == pytest.approx(service_s)
        assert got[key][:2] == [count, nbytes]
        assert got[key][2] == pytest.approx(time_s)
        assert got[key][3] == pytest.approx(wait_s)
