"""Model shapes, counters and initialization, in one process (no ranks)."""

from __future__ import annotations

import math

import pytest
import torch

from commlens.errors import UsageError
from commlens.job.models import (
    PRESETS,
    flops_per_step,
    get_preset,
    non_embedding_params,
    param_count,
    param_shapes,
    sequence_parallel_partial,
    stage_layers,
    tp_split_dim,
)
from commlens.workloads.init import init_parameters
from commlens.workloads.models import build_model
from commlens.workloads.tp import TPContext

LAYOUTS = [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2), (4, 2)]


def _numel(shapes: list[tuple[str, tuple[int, ...]]]) -> int:
    return sum(math.prod(shape) for _, shape in shapes)


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "t5-tiny"])
@pytest.mark.parametrize(("tp", "pp"), LAYOUTS)
def test_param_shapes_equal_the_built_model(name: str, tp: int, pp: int) -> None:
    cfg = get_preset(name)
    if cfg.arch == "t5" and pp > 1:
        with pytest.raises(UsageError, match="not implemented for T5"):
            param_shapes(cfg, tp=tp, pp=pp)
        return
    for tp_rank in range(tp):
        for stage in range(pp):
            model = build_model(cfg, TPContext(size=tp, rank=tp_rank), pp, stage)
            built = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
            assert built == param_shapes(cfg, tp=tp, tp_rank=tp_rank, pp=pp, pp_stage=stage)


def test_param_shapes_of_a_three_stage_split() -> None:
    cfg = get_preset("gpt-19m")  # 6 layers
    stages = [param_shapes(cfg, pp=4, pp_stage=s) for s in range(4)]
    blocks = [sorted({n.split(".")[1] for n, _ in st if n.startswith("blocks.")}) for st in stages]
    assert blocks == [["0", "1"], ["2", "3"], ["4"], ["5"]]
    assert stages[0][0][0] == "embed.word.weight" and stages[3][-1][0] == "lm_head.weight"
    # the tied copy is the only parameter held twice
    assert _numel([s for st in stages for s in st]) == param_count(cfg) + cfg.vocab * cfg.hidden
    assert [list(stage_layers(7, 3, s)) for s in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "t5-tiny"])
def test_param_count_equals_the_built_model(name: str) -> None:
    cfg = get_preset(name)
    model = build_model(cfg)
    assert sum(p.numel() for p in model.parameters()) == param_count(cfg)
    assert type(model).num_params(cfg) == param_count(cfg)  # type: ignore[operator]


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_follow_the_closed_form(name: str) -> None:
    cfg = get_preset(name)
    L, h, V = cfg.layers, cfg.hidden, cfg.vocab
    assert _numel(param_shapes(cfg)) == param_count(cfg)
    if cfg.arch == "gpt":
        assert param_count(cfg) == 12 * L * h * h + 13 * L * h + (V + cfg.max_positions) * h + 2 * h
    elif cfg.arch == "bert":
        embed = (V + cfg.max_positions + cfg.type_vocab) * h
        assert param_count(cfg) == embed + L * (12 * h * h + 13 * h) + h * h + 5 * h + V
    else:
        f, Ld = cfg.ffn_hidden, cfg.decoder_layers
        enc = L * (4 * h * h + 2 * h * f + 2 * h)
        dec = Ld * (8 * h * h + 2 * h * f + 3 * h)
        assert param_count(cfg) == V * h + enc + dec + 2 * (cfg.rel_buckets * cfg.heads + h)


@pytest.mark.parametrize("name", [n for n in PRESETS if n.startswith("gpt-")])
def test_ladder_non_embedding_parameters_are_about_12_l_h2(name: str) -> None:
    cfg = get_preset(name)
    L, h = cfg.layers, cfg.hidden
    assert non_embedding_params(cfg) == L * (12 * h * h + 13 * h)
    assert non_embedding_params(cfg) / (12 * L * h * h) == pytest.approx(1, rel=0.03)


def test_known_model_sizes() -> None:
    assert param_count(get_preset("gpt-125m")) / 125e6 == pytest.approx(1, rel=0.01)
    assert param_count(get_preset("t5-small")) / 60.5e6 == pytest.approx(1, rel=0.01)
    assert param_count(get_preset("bert-large")) / 335e6 == pytest.approx(1, rel=0.01)


@pytest.mark.parametrize("recompute", [False, True])
def test_gpt_flops_follow_reference_formula(recompute: bool) -> None:
    cfg = get_preset("gpt-1.3b")
    L, h, V, s, b, k = cfg.layers, cfg.hidden, cfg.vocab, 2048, 4, 8
    c = 4 if recompute else 3
    expected = 24 * c * (b * k) * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert flops_per_step(cfg, s, b, k, recompute) == pytest.approx(expected, rel=1e-12)
    t5 = get_preset("t5-small")
    assert flops_per_step(t5, 512, 1, 1, False) > flops_per_step(
        get_preset("gpt-19m"), 512, 1, 1, False
    )


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "t5-tiny"])
def test_tensor_parallel_init_is_a_slice_of_the_full_init(name: str) -> None:
    cfg = get_preset(name)
    full = build_model(cfg)
    init_parameters(full, cfg, TPContext(), seed=7)
    ref = dict(full.named_parameters())
    for rank in range(2):
        tp = TPContext(size=2, rank=rank)
        shard = build_model(cfg, tp)
        init_parameters(shard, cfg, tp, seed=7)
        for n, p in shard.named_parameters():
            dim = getattr(p, "tp_dim", None)
            want = ref[n] if dim is None else ref[n].narrow(dim, rank * p.shape[dim], p.shape[dim])
            assert torch.equal(p, want), n
    assert ref["embed.word.weight"].std().item() == pytest.approx(0.02, rel=0.1)


def test_last_stage_copy_of_tied_embedding_equals_the_first() -> None:
    cfg = get_preset("gpt-tiny")
    first, last = build_model(cfg, pp=2, stage=0), build_model(cfg, pp=2, stage=1)
    for m in (first, last):
        init_parameters(m, cfg, TPContext(), seed=3)
    assert torch.equal(first.embed.word.weight, last.lm_head.weight)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "tp", "pp", "match"),
    [
        ("gpt-tiny", 3, 1, "tp=3 does not divide"),
        ("gpt-tiny", 1, 3, "pp=3 is more than"),
        ("gpt-19m", 16, 1, "heads"),
    ],
)
def test_bad_layouts_are_refused(name: str, tp: int, pp: int, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        param_shapes(get_preset(name), tp=tp, pp=pp)


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(UsageError, match="gpt-tiny"):
        get_preset("gpt-7")


@pytest.mark.parametrize("name", ["gpt-tiny", "bert-tiny", "t5-tiny"])
@pytest.mark.parametrize("pp", [1, 2])
def test_tp_plan_describes_the_built_model(name: str, pp: int) -> None:
    cfg = get_preset(name)
    if cfg.arch == "t5" and pp > 1:
        return
    tp = TPContext(size=2, rank=1, sequence_parallel=True)
    split = 0
    for stage in range(pp):
        for n, p in build_model(cfg, tp, pp, stage).named_parameters():
            assert getattr(p, "tp_dim", None) == tp_split_dim(n), n
            assert getattr(p, "sequence_parallel", False) == sequence_parallel_partial(n), n
            split += tp_split_dim(n) is not None
    assert split >= 4 * cfg.layers
