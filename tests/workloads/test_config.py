"""Layouts implied by each scheme, config validation and its JSON round trip."""

from __future__ import annotations

import json

import pytest

from commlens.errors import UsageError
from commlens.job.models import get_preset, masked_per_sequence
from commlens.job.parallel import resolve_dims
from commlens.job.spec import Job
from commlens.workloads.data import global_batch, microbatch


@pytest.mark.parametrize(
    ("scheme", "nproc", "given", "expected"),
    [
        ("dp", 4, {}, (4, 1, 1)),
        ("zero3", 2, {}, (2, 1, 1)),
        ("tp", 4, {}, (1, 4, 1)),
        ("tp", 4, {"dp": 2}, (2, 2, 1)),
        ("tp", 4, {"tp": 2}, (2, 2, 1)),
        ("pp", 4, {}, (1, 1, 4)),
        ("pp", 4, {"pp": 2}, (2, 1, 2)),
        ("3d", 8, {"tp": 2, "pp": 2}, (2, 2, 2)),
        ("3d", 4, {"dp": 1, "tp": 2, "pp": 2}, (1, 2, 2)),
    ],
)
def test_scheme_layouts(
    scheme: str, nproc: int, given: dict[str, int], expected: tuple[int, ...]
) -> None:
    dims = resolve_dims(scheme, nproc, **given)
    assert (dims.dp, dims.tp, dims.pp) == expected


@pytest.mark.parametrize(
    ("scheme", "nproc", "given", "match"),
    [
        ("dp", 4, {"tp": 2}, "pure data parallelism"),
        ("tp", 4, {"pp": 2}, "no pipeline stages"),
        ("pp", 4, {"tp": 2}, "no tensor parallelism"),
        ("3d", 4, {"tp": 2}, "at least two of"),
        ("3d", 4, {"dp": 0, "tp": 2}, "dp must be a positive integer"),
        ("3d", 6, {"tp": 4, "pp": 1}, "not divisible"),
        ("fsdp", 2, {}, "unknown scheme"),
    ],
)
def test_bad_layouts(scheme: str, nproc: int, given: dict[str, int], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        resolve_dims(scheme, nproc, **given)


def test_config_round_trips_through_json() -> None:
    wcfg = Job(
        get_preset("bert-tiny"),
        "3d",
        resolve_dims("3d", 4, tp=2, pp=2),
        seq_len=128,
        micro_batch=2,
        microbatches=4,
        sequence_parallel=True,
        dtype="bf16",
        schedule="gpipe",
    )
    data = json.loads(json.dumps(wcfg.to_dict()))
    assert data["preset"] == "bert-tiny" and data["dims"]["tp"] == 2
    assert Job.from_dict(data) == wcfg
    assert wcfg.global_batch == 1 * 4 * 2 and wcfg.dtype_bytes == 2


def test_sequence_parallel_needs_seq_len_divisible_by_tp() -> None:
    with pytest.raises(UsageError, match="divide seq_len"):
        Job(get_preset("gpt-tiny"), "tp", resolve_dims("tp", 4), seq_len=18, sequence_parallel=True)


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "t5-tiny"])
def test_data_is_deterministic_and_split_by_rows(name: str) -> None:
    cfg = get_preset(name)
    a = global_batch(cfg, 16, 6, step=2, seed=5)
    b = global_batch(cfg, 16, 6, step=2, seed=5)
    c = global_batch(cfg, 16, 6, step=3, seed=5)
    assert all(bool((a[k] == b[k]).all()) for k in a)
    assert any(not bool((a[k] == c[k]).all()) for k in a)
    for tensor in a.values():
        assert tensor.shape[0] == 6 and int(tensor.max()) < cfg.vocab
    mb = microbatch(a, 1, 2, a[next(iter(a))].device)
    assert all(bool((mb[k] == a[k][2:4]).all()) for k in a)
    if cfg.arch == "bert":
        assert a["mask_pos"].shape == (6, masked_per_sequence(16))
        assert bool((a["tokens"].gather(1, a["mask_pos"]) == cfg.vocab - 1).all())
