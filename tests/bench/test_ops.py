from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from commlens.bench.names import OPS
from commlens.bench.ops import element_count, make_case
from commlens.launch import free_port
from commlens.optable import bus_factor


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("sendrecv", 4, 1.0),
    ],
)
def test_busbw_factor_is_the_nccl_tests_one(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_element_count_splits_evenly() -> None:
    assert element_count("all_reduce", 100, 4, 3) == 25
    assert element_count("all_gather", 100, 4, 3) == 24  # 8 per rank
    assert element_count("all_to_all", 8, 4, 4) == 0  # too small for 4 ranks
    assert element_count("sendrecv", 3, 4, 2) == 0


@pytest.fixture
def one_rank_group():  # type: ignore[no-untyped-def]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank_group")
@pytest.mark.parametrize("op", [op for op in OPS if op != "sendrecv"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_checks_pass_on_a_correct_op(op: str, dtype: torch.dtype) -> None:
    case = make_case(op, 64, dtype, torch.device("cpu"))
    case.run()
    assert case.check()


@pytest.mark.usefixtures("one_rank_group")
def test_check_catches_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    real = dist.all_reduce

    def doubled(tensor: torch.Tensor, *args: object, **kwargs: object) -> None:
        real(tensor, *args, **kwargs)
        tensor.mul_(2)

    case = make_case("all_reduce", 64, torch.float32, torch.device("cpu"))
    monkeypatch.setattr(dist, "all_reduce", doubled)
    assert not case.check()
