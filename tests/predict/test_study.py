"""The studies' findings, computed by examples/predict_study.py from the model alone."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

import pytest

from commlens.job import ParallelDims

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "predict_study.py"


@pytest.fixture(scope="module")
def study() -> ModuleType:
    spec = importlib.util.spec_from_file_location("predict_study", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["predict_study"] = module
    spec.loader.exec_module(module)
    return module


def test_zero3_moves_one_and_a_half_times_dp_across_the_ladder(study: ModuleType) -> None:
    for model in study.LADDER:
        r = study.zero_ratios(model)
        assert r["zero3"] == pytest.approx(1.5, rel=0.02), model
        assert r["zero3 (textbook)"] == pytest.approx(1.5, rel=0.02), model
        assert r["zero2"] == pytest.approx(1.0, rel=0.02), model
        assert r["zero1 (textbook)"] == pytest.approx(1.0, rel=1e-9), model
        # ZeroRedundancyOptimizer: DDP's all-reduce plus a broadcast of every parameter
        assert r["zero1"] == pytest.approx(1 + 1 / (2 * 7 / 8), rel=0.01), model


def test_dp_volume_does_not_depend_on_sequence_length(study: ModuleType) -> None:
    for scheme in ("dp", "zero1", "zero2", "zero3"):
        vols = study.volume_by_seq_len("gpt-350m", scheme, ParallelDims(8), (256, 512, 1024, 2048))
        assert len(set(vols)) == 1, scheme


@pytest.mark.parametrize(
    ("scheme", "dims", "kw"),
    [
        ("tp", ParallelDims(8, dp=1, tp=8), {}),
        ("tp", ParallelDims(4, dp=1, tp=4), {"sequence_parallel": True}),
        ("pp", ParallelDims(4, dp=1, pp=4), {"microbatches": 8}),
        ("3d", ParallelDims(8, dp=2, tp=2, pp=2), {"microbatches": 4}),
    ],
)
def test_tp_and_pp_volume_grow_linearly_with_sequence_length(
    study: ModuleType, scheme: str, dims: ParallelDims, kw: dict[str, object]
) -> None:
    seqs = (256, 512, 768, 1024)
    vols = study.volume_by_seq_len("gpt-350m", scheme, dims, seqs, **kw)
    slopes = [(b - a) / 256 for a, b in itertools.pairwise(vols)]
    assert slopes[0] > 0
    assert slopes == pytest.approx([slopes[0]] * 3, rel=1e-9)  # affine in s


def test_pure_tp_volume_is_proportional_to_sequence_length(study: ModuleType) -> None:
    v1, v2 = study.volume_by_seq_len("gpt-1.3b", "tp", ParallelDims(8, dp=1, tp=8), (1024, 2048))
    assert v2 == pytest.approx(2 * v1, rel=1e-12)


def test_study_a_shape(study: ModuleType) -> None:
    preds = study.study_a()
    speedup = {name: p.speedups()[-1] for name, p in preds.items()}  # rdma-100g over tcp-10g
    dp = speedup["DP (dp=8)"]
    assert dp >= 3.0  # several times faster
    for name, value in speedup.items():
        if name != "DP (dp=8)":
            assert 1.0 < value < dp / 2, name  # model parallelism is far less sensitive
    dp_pred = preds["DP (dp=8)"]
    assert dp_pred.networks[0].comm_share > 0.8  # all-reduce dominates DP over TCP


def test_example_runs(study: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    study.main()
    out = capsys.readouterr().out
    assert "Study A" in out and "gpt-13b" in out
