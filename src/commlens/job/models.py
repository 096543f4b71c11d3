"""Model shapes: the GPT, BERT and T5 configurations, their presets and counters.

One :class:`ModelConfig` describes the shape of a model; the workloads build
it (``commlens.workloads.models``) and the analytical model predicts it, both
from this file. :func:`param_shapes` lists, in registration order, exactly the
parameters that the built model holds on one rank of a tp × pp layout, so the
analytical model can size every gradient bucket and shard without building a
model (a test holds it equal to ``model.named_parameters()``).

Conventions of the models (Megatron-LM style):

- GPT: decoder, pre-LayerNorm, learned positions, GELU MLP, biases, final
  LayerNorm, LM head tied to the word embedding.
- BERT: encoder, post-LayerNorm, word + position + token-type embeddings
  with an embedding LayerNorm, MLM head (dense, GELU, LayerNorm, decoder tied
  to the word embedding, output bias); no pooler / next-sentence head.
- T5 (v1.0): encoder-decoder, RMSNorm without bias, no linear biases, ReLU MLP,
  relative position bias in each stack, one word embedding shared by encoder,
  decoder and LM head.
- Tensor parallelism splits heads (attention), the MLP hidden size and the
  vocabulary; the attention projection packs q, k, v per head
  (``[heads, 3, head_dim]``) so a contiguous slice holds whole heads.
- Pipeline parallelism splits the layers evenly (earlier stages take the
  remainder); the first stage holds the embeddings, the last stage the final
  norm and head and, when it is not also the first, its own copy of the tied
  word embedding (``lm_head.weight``), kept in sync by an all-reduce.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from commlens.errors import UsageError

ARCHS = ("gpt", "bert", "t5")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of one transformer model."""

    name: str
    """Preset name (or any label)."""
    arch: str
    """"gpt" (decoder), "bert" (encoder) or "t5" (encoder-decoder)."""
    layers: int
    """Transformer layers; for T5 the encoder layers."""
    hidden: int
    """Model width h."""
    heads: int
    """Attention heads; head size is hidden / heads."""
    ffn_hidden: int
    """MLP inner width (4·h for GPT and BERT)."""
    vocab: int
    """Vocabulary size, already padded (GPT-NeoX pads to 50304)."""
    max_positions: int = 2048
    """Learned position table size (GPT, BERT); the longest sequence for T5."""
    decoder_layers: int = 0
    """T5 decoder layers (0 for GPT and BERT)."""
    type_vocab: int = 0
    """BERT token-type (segment) vocabulary; 0 for the others."""
    rel_buckets: int = 0
    """T5 relative-position buckets per stack; 0 for the others."""
    rel_max_distance: int = 128
    """T5 relative distance beyond which buckets saturate."""
    tied_embedding: bool = True
    """The LM head reuses the word embedding (always true for the built-ins)."""
    layernorm_eps: float = 1e-5
    """Epsilon of the normalization layers."""

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise UsageError(f"model {self.name}: arch must be one of {', '.join(ARCHS)}")
        for field in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "max_positions"):
            if getattr(self, field) < 1:
                raise UsageError(f"model {self.name}: {field} must be positive")
        if self.hidden % self.heads:
            raise UsageError(
                f"model {self.name}: hidden {self.hidden} is not divisible by heads {self.heads}"
            )
        if self.arch == "t5":
            if self.decoder_layers < 1 or self.rel_buckets < 2:
                raise UsageError(f"model {self.name}: T5 needs decoder_layers and rel_buckets")
        elif self.decoder_layers or self.rel_buckets:
            raise UsageError(f"model {self.name}: only T5 has decoder_layers / rel_buckets")
        if self.arch == "bert" and self.type_vocab < 1:
            raise UsageError(f"model {self.name}: BERT needs type_vocab >= 1")
        if self.arch != "bert" and self.type_vocab:
            raise UsageError(f"model {self.name}: only BERT has type_vocab")
        if not self.tied_embedding:
            raise UsageError(f"model {self.name}: only tied embeddings are implemented")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def total_layers(self) -> int:
        """Encoder plus decoder layers."""
        return self.layers + self.decoder_layers

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _gpt(name: str, layers: int, hidden: int, heads: int, **kw: Any) -> ModelConfig:
    kw.setdefault("vocab", 50304)
    kw.setdefault("max_positions", 2048)
    return ModelConfig(name, "gpt", layers, hidden, heads, 4 * hidden, **kw)


def _bert(name: str, layers: int, hidden: int, heads: int, **kw: Any) -> ModelConfig:
    kw.setdefault("vocab", 30592)  # 30522 padded to a multiple of 128
    kw.setdefault("max_positions", 512)
    kw.setdefault("layernorm_eps", 1e-12)
    return ModelConfig(name, "bert", layers, hidden, heads, 4 * hidden, type_vocab=2, **kw)


def _t5(name: str, layers: int, hidden: int, heads: int, ffn: int, **kw: Any) -> ModelConfig:
    kw.setdefault("vocab", 32128)
    kw.setdefault("max_positions", 512)
    kw.setdefault("layernorm_eps", 1e-6)
    return ModelConfig(
        name, "t5", layers, hidden, heads, ffn, decoder_layers=layers, rel_buckets=32, **kw
    )


PRESETS: dict[str, ModelConfig] = {
    cfg.name: cfg
    for cfg in (
        # Tiny: a training step in well under a second per rank on a 2-core CPU.
        _gpt("gpt-tiny", 2, 64, 4, vocab=512, max_positions=128),
        _bert("bert-tiny", 2, 64, 4, vocab=512, max_positions=128),
        _t5("t5-tiny", 2, 64, 4, 256, vocab=512, max_positions=128),
        # The GPT-NeoX ladder of Study B (conventions §1).
        _gpt("gpt-19m", 6, 512, 8),
        _gpt("gpt-49m", 10, 640, 10),
        _gpt("gpt-125m", 12, 768, 12),
        _gpt("gpt-350m", 24, 1024, 16),
        _gpt("gpt-760m", 24, 1536, 16),
        _gpt("gpt-1.3b", 24, 2048, 16),
        _gpt("gpt-2.7b", 32, 2560, 32),
        _gpt("gpt-6.7b", 32, 4096, 32),
        _gpt("gpt-13b", 40, 5120, 40),
        # Study A's BERT and T5.
        _bert("bert-base", 12, 768, 12),
        _bert("bert-large", 24, 1024, 16),
        _t5("t5-small", 6, 512, 8, 2048),
        _t5("t5-base", 12, 768, 12, 3072),
        _t5("t5-large", 24, 1024, 16, 4096),
    )
}


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``; a :class:`UsageError` naming the choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise UsageError(
            f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}"
        ) from None


# --- layout checks -----------------------------------------------------------


def check_layout(
    cfg: ModelConfig,
    tp: int = 1,
    pp: int = 1,
    seq_len: int | None = None,
    sequence_parallel: bool = False,
) -> None:
    """Refuse a tp × pp split this model cannot take (one clear line)."""
    if tp < 1 or pp < 1:
        raise UsageError(f"tp and pp must be positive, got tp={tp} pp={pp}")
    for what, value in (
        ("heads", cfg.heads),
        ("ffn_hidden", cfg.ffn_hidden),
        ("padded vocab", cfg.vocab),
    ):
        if value % tp:
            raise UsageError(f"tp={tp} does not divide {cfg.name}'s {what} ({value})")
    if pp > 1 and cfg.arch == "t5":
        raise UsageError("pipeline parallelism is not implemented for T5; use dp, zero* or tp")
    if pp > cfg.layers:
        raise UsageError(f"pp={pp} is more than {cfg.name}'s {cfg.layers} layers")
    if seq_len is not None:
        if seq_len < 1:
            raise UsageError(f"seq_len must be positive, got {seq_len}")
        if cfg.arch != "t5" and seq_len > cfg.max_positions:
            raise UsageError(
                f"seq_len {seq_len} exceeds {cfg.name}'s {cfg.max_positions} positions"
            )
        if sequence_parallel and seq_len % tp:
            raise UsageError(f"sequence parallel needs tp={tp} to divide seq_len {seq_len}")


def stage_layers(num_layers: int, pp: int, stage: int) -> range:
    """Global indices of the layers on pipeline ``stage`` (earlier stages take the remainder)."""
    if not 0 <= stage < pp:
        raise UsageError(f"pipeline stage {stage} is outside 0..{pp - 1}")
    base, extra = divmod(num_layers, pp)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def masked_per_sequence(seq_len: int) -> int:
    """Positions BERT's MLM loss covers in every synthetic sequence (15%, at least one)."""
    return max(1, round(0.15 * seq_len))


# --- exact parameter lists -----------------------------------------------------

Shape = tuple[int, ...]


def _norm(prefix: str, h: int, bias: bool) -> list[tuple[str, Shape]]:
    out: list[tuple[str, Shape]] = [(f"{prefix}.weight", (h,))]
    return [*out, (f"{prefix}.bias", (h,))] if bias else out


def _block(cfg: ModelConfig, prefix: str, tp: int, cross: bool = False) -> list[tuple[str, Shape]]:
    """One transformer layer, in the order ``models.blocks`` registers it."""
    h, f = cfg.hidden, cfg.ffn_hidden
    bias = cfg.arch != "t5"
    out: list[tuple[str, Shape]] = []

    def linear(name: str, out_dim: int, in_dim: int) -> None:
        out.append((f"{prefix}.{name}.weight", (out_dim, in_dim)))
        if bias:
            out.append((f"{prefix}.{name}.bias", (out_dim,)))

    out += _norm(f"{prefix}.ln1", h, bias)
    linear("attn.qkv", 3 * h // tp, h)  # column parallel
    linear("attn.proj", h, h // tp)  # row parallel (bias replicated)
    out += _norm(f"{prefix}.ln2", h, bias)
    if cross:
        linear("cross.q", h // tp, h)
        linear("cross.kv", 2 * h // tp, h)
        linear("cross.proj", h, h // tp)
        out += _norm(f"{prefix}.ln3", h, bias)
    linear("mlp.fc1", f // tp, h)
    linear("mlp.fc2", h, f // tp)
    return out


def param_shapes(
    cfg: ModelConfig, tp: int = 1, tp_rank: int = 0, pp: int = 1, pp_stage: int = 0
) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every parameter one rank holds, in registration order.

    Equal to ``[(n, tuple(p.shape)) for n, p in model.named_parameters()]`` of
    the model the workloads build for that rank (before any DDP/FSDP wrapper).
    Shards are even, so ``tp_rank`` does not change a shape; it is checked.
    """
    check_layout(cfg, tp, pp)
    if not 0 <= tp_rank < tp:
        raise UsageError(f"tp_rank {tp_rank} is outside 0..{tp - 1}")
    if not 0 <= pp_stage < pp:
        raise UsageError(f"pp_stage {pp_stage} is outside 0..{pp - 1}")
    h, v = cfg.hidden, cfg.vocab // tp
    first, last = pp_stage == 0, pp_stage == pp - 1
    out: list[tuple[str, Shape]] = []
    if cfg.arch == "t5":
        out.append(("embed.word.weight", (v, h)))
        for stack, n, cross in (
            ("encoder", cfg.layers, False),
            ("decoder", cfg.decoder_layers, True),
        ):
            out.append((f"{stack}.rel_bias.weight", (cfg.rel_buckets, cfg.heads // tp)))
            for i in range(n):
                out += _block(cfg, f"{stack}.blocks.{i}", tp, cross=cross)
            out += _norm(f"{stack}.ln_f", h, bias=False)
        return out
    if first:
        out.append(("embed.word.weight", (v, h)))
        out.append(("embed.pos.weight", (cfg.max_positions, h)))
        if cfg.arch == "bert":
            out.append(("embed.token_type.weight", (cfg.type_vocab, h)))
            out += _norm("embed.ln", h, bias=True)
    for i in stage_layers(cfg.layers, pp, pp_stage):
        out += _block(cfg, f"blocks.{i}", tp)
    if last:
        if cfg.arch == "gpt":
            out += _norm("ln_f", h, bias=True)
        else:  # BERT MLM head: its own bias first (a module's parameters precede its children's)
            out.append(("mlm.bias", (v,)))
            out += [("mlm.dense.weight", (h, h)), ("mlm.dense.bias", (h,))]
            out += _norm("mlm.ln", h, bias=True)
        if not first:
            out.append(("lm_head.weight", (v, h)))  # this stage's copy of the tied embedding
    return out


# --- how tensor parallelism splits each parameter -------------------------------

TP_PLAN: dict[str, str] = {
    "embed.word": "vocab",  # [V/tp, h]: each rank looks up its vocabulary range; summed over tp
    "lm_head": "vocab",  # the last stage's copy of the tied embedding
    "mlm.bias": "vocab",  # BERT's output bias [V/tp]
    "attn.qkv": "colwise",  # [3h/tp, h]: whole heads per rank; input gradient all-reduced
    "attn.proj": "rowwise",  # [h, h/tp]: output all-reduced (bias replicated)
    "cross.q": "colwise",
    "cross.kv": "colwise",
    "cross.proj": "rowwise",
    "mlp.fc1": "colwise",  # [f/tp, h]
    "mlp.fc2": "rowwise",  # [h, f/tp]
    "rel_bias": "heads",  # T5 [buckets, heads/tp]
}
"""Module (or parameter) name suffix → how tensor parallelism splits it; the rest is replicated."""


def tp_split_dim(name: str) -> int | None:
    """The dim of parameter ``name`` that tensor parallelism splits (None: replicated)."""
    module, _, leaf = name.rpartition(".")
    for key, style in TP_PLAN.items():
        if name == key or name.endswith("." + key):
            return 0  # a parameter named in the plan (mlm.bias)
        if module == key or module.endswith("." + key):
            if style in ("vocab", "colwise"):
                return 0
            if style == "heads":
                return 1
            return 1 if leaf == "weight" else None  # rowwise: the bias is added after the sum
    return None


def sequence_parallel_partial(name: str) -> bool:
    """Under sequence parallelism, a replicated parameter that sees only this rank's
    part of the sequence: its gradient is all-reduced over tp after backward."""
    module, _, _ = name.rpartition(".")
    last = module.rpartition(".")[2]
    if module.startswith("mlm."):
        return False  # the MLM head runs on the gathered sequence
    if last in ("ln1", "ln2", "ln3", "ln_f", "ln"):
        return True
    if name in ("embed.pos.weight", "embed.token_type.weight"):
        return True
    return tp_split_dim(name) is None and any(
        module == k or module.endswith("." + k) for k, v in TP_PLAN.items() if v == "rowwise"
    )


# --- counters -----------------------------------------------------------------


def _layer_params(cfg: ModelConfig, cross: bool = False) -> int:
    h, f = cfg.hidden, cfg.ffn_hidden
    if cfg.arch == "t5":
        attn = 4 * h * h
        return attn + 2 * h * f + 2 * h + ((attn + h) if cross else 0)
    return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h


def param_count(cfg: ModelConfig) -> int:
    """Unique parameters of the whole model (tied weights counted once), closed form.

    GPT with f = 4h: 12·L·h² + 13·L·h + (V + P)·h + 2·h.
    """
    h, v = cfg.hidden, cfg.vocab
    if cfg.arch == "gpt":
        return cfg.layers * _layer_params(cfg) + (v + cfg.max_positions) * h + 2 * h
    if cfg.arch == "bert":
        embed = (v + cfg.max_positions + cfg.type_vocab) * h + 2 * h
        head = h * h + h + 2 * h + v
        return embed + cfg.layers * _layer_params(cfg) + head
    stacks = 2 * (cfg.rel_buckets * cfg.heads + h)  # rel bias and final norm per stack
    return (
        v * h
        + cfg.layers * _layer_params(cfg)
        + cfg.decoder_layers * _layer_params(cfg, cross=True)
        + stacks
    )


def non_embedding_params(cfg: ModelConfig) -> int:
    """Parameters in the transformer layers (what the ladder's names count)."""
    return cfg.layers * _layer_params(cfg) + cfg.decoder_layers * _layer_params(cfg, cross=True)


def flops_per_step(
    cfg: ModelConfig, seq_len: int, micro_batch: int, microbatches: int, recompute: bool
) -> float:
    """Model FLOPs of one step of one model replica (all its tp × pp ranks together).

    conventions §2 (GPT-NeoX convention), with B = micro_batch·microbatches:
    ``24·c·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))``, c = 4 with recomputation,
    else 3. Written per token as c·(Σ_layers (2·W_layer + 4·s·h·attentions)
    + 1.5·V·h), which is that formula for GPT (W = 12h²) and extends it to
    BERT and T5 (decoder layers have a second attention; T5 has no biases).
    """
    if seq_len < 1 or micro_batch < 1 or microbatches < 1:
        raise UsageError("seq_len, micro_batch and microbatches must be positive")
    c = 4 if recompute else 3
    h, s, f = cfg.hidden, seq_len, cfg.ffn_hidden
    weights = 4 * h * h + 2 * h * f
    per_token = float(cfg.layers * (2 * weights + 4 * s * h))
    per_token += cfg.decoder_layers * (2 * (weights + 4 * h * h) + 8 * s * h)
    per_token += 1.5 * cfg.vocab * h
    return float(c * micro_batch * microbatches * s * per_token)
