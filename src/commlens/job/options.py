"""The command-line options of a job, derived from :class:`~commlens.job.spec.Job`.

``commlens run`` and ``commlens predict`` describe a job with the same flags:
one name, one type and one help text per field. :data:`OPTIONS` says which
command takes which flag with what default; :func:`add_job_options` adds them
to a parser and :func:`job_from_args` builds the job from the parsed
namespace. A sweep point's keys are run's flags of the job (:func:`point_keys`).

Where the commands differ, each keeps its own default: ``run`` resolves
--nproc ranks for the scheme (--dp/--tp/--pp optional) and trains s = 128,
b = 2; ``predict`` takes the degrees (each 1 by default), s = the model's
positions and b = 1, and may override the preset's shape.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from commlens.errors import UsageError
from commlens.job.models import PRESETS, ModelConfig, get_preset
from commlens.job.parallel import SCHEMES, ParallelDims, resolve_dims
from commlens.job.spec import DTYPE_BYTES, SCHEDULES, Job, RunSettings

RUN, PREDICT = "run", "predict"
TOTAL_RANKS_HELP = (
    "ranks in total, over all emulated nodes (torchrun's --nproc-per-node × --nnodes)"
)
NODES_HELP = (
    "emulated nodes, as torchrun's --nnodes (network namespaces, needs root); "
    "the ranks spread evenly over them"
)
BOTH = (RUN, PREDICT)
SHAPE_OVERRIDES = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "max_positions")
"""Fields of the preset's :class:`ModelConfig` that ``predict`` may override."""


@dataclass(frozen=True)
class Option:
    """One flag (``--dest-with-dashes``) of a job."""

    dest: str
    """The namespace attribute: a field of the job, its model, layout or run settings."""
    part: str
    """What it sets: "model", "shape" (a Job field), "layout" or "run" (RunSettings)."""
    help: str
    defaults: dict[str, Any]
    """Command → default; a command takes the option only where it has a key."""
    kind: type = int
    choices: tuple[str, ...] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    """Command → the help's note on the default, where the value does not say it."""
    required: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    def help_for(self, command: str) -> str:
        """The help text as ``command`` shows it, with its default."""
        if self.required or self.kind is bool:
            return self.help
        if command in self.notes:
            note = self.notes[command]
            return f"{self.help} ({note})" if note else self.help
        value = self.defaults[command]
        shown = f"{value:g}" if self.kind is float else str(value)
        return f"{self.help} (default {shown})"


def _overrides() -> tuple[Option, ...]:
    return tuple(
        Option(name, "model", f"override the preset's {name}", {PREDICT: None}, notes={PREDICT: ""})
        for name in SHAPE_OVERRIDES
    )


OPTIONS: tuple[Option, ...] = (
    Option(
        "model",
        "model",
        f"model preset: {', '.join(PRESETS)}",
        dict.fromkeys(BOTH),
        kind=str,
        required=True,
        metavar="PRESET",
    ),
    *_overrides(),
    Option(
        "scheme",
        "shape",
        "dp (DDP), zero1 (DDP + ZeroRedundancyOptimizer), zero2/zero3 (fully_shard), "
        "tp (Megatron tensor parallel), pp (pipeline), 3d (dp × tp × pp)",
        dict.fromkeys(BOTH),
        kind=str,
        choices=SCHEMES,
        required=True,
    ),
    Option("nproc", "layout", TOTAL_RANKS_HELP, {RUN: 2}),
    Option(
        "dp",
        "layout",
        "data-parallel degree",
        {RUN: None, PREDICT: 1},
        notes={RUN: "default: what tp and pp leave"},
    ),
    Option(
        "tp", "layout", "tensor-parallel degree", {RUN: None, PREDICT: 1}, notes={RUN: "tp and 3d"}
    ),
    Option("pp", "layout", "pipeline stages", {RUN: None, PREDICT: 1}, notes={RUN: "pp and 3d"}),
    Option(
        "seq_len",
        "shape",
        "tokens per sequence",
        {RUN: 128, PREDICT: None},
        notes={PREDICT: "default: the model's positions, 2048 for GPT"},
    ),
    Option(
        "micro_batch",
        "shape",
        "sequences per micro-batch per data-parallel rank",
        {RUN: 2, PREDICT: 1},
    ),
    Option(
        "microbatches",
        "shape",
        "micro-batches per step: gradient accumulation / pipeline depth",
        dict.fromkeys(BOTH, 1),
    ),
    Option(
        "dtype",
        "shape",
        "training dtype for weights, gradients and activations",
        dict.fromkeys(BOTH, "fp32"),
        kind=str,
        choices=tuple(DTYPE_BYTES),
    ),
    Option(
        "recompute",
        "shape",
        "recompute activations in backward",
        dict.fromkeys(BOTH, False),
        kind=bool,
    ),
    Option(
        "schedule",
        "shape",
        "pipeline schedule",
        dict.fromkeys(BOTH, "1f1b"),
        kind=str,
        choices=SCHEDULES,
    ),
    Option(
        "sequence_parallel",
        "shape",
        "Megatron sequence parallelism in the tensor-parallel regions",
        dict.fromkeys(BOTH, False),
        kind=bool,
    ),
    Option(
        "steps",
        "run",
        "how many training steps to run (a count; the --steps of report, compare and "
        "export is a slice of step numbers instead)",
        {RUN: 5},
    ),
    Option("warmup_steps", "run", "first steps left out of the summary", {RUN: 1}),
    Option("seed", "run", "seed of data and weights", {RUN: 1234}),
    Option("lr", "run", "AdamW learning rate", {RUN: 1e-3}, kind=float),
    Option(
        "backend",
        "run",
        "torch.distributed backend",
        {RUN: "auto"},
        kind=str,
        choices=("auto", "gloo", "nccl"),
        notes={RUN: "auto: nccl when there is a GPU per rank"},
    ),
)
"""Every flag of a job, in --help order."""


def options(command: str) -> tuple[Option, ...]:
    """The options ``command`` takes."""
    return tuple(o for o in OPTIONS if command in o.defaults)


def add_job_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Add ``command``'s job flags to ``parser``."""
    for o in options(command):
        if o.kind is bool:
            parser.add_argument(o.flag, action="store_true", help=o.help_for(command))
            continue
        kwargs: dict[str, Any] = {"type": o.kind, "help": o.help_for(command)}
        if o.required:
            kwargs["required"] = True
        else:
            kwargs["default"] = o.defaults[command]
        if o.choices:
            kwargs["choices"] = o.choices
        if o.metavar:
            kwargs["metavar"] = o.metavar
        if o.dest == "nproc":
            kwargs["action"] = TotalRanks
        parser.add_argument(o.flag, **kwargs)


class TotalRanks(argparse.Action):
    """Stores ``--nproc`` and notes that it was given, for :func:`resolve_nproc`."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.nproc_given = True


def add_node_options(parser: argparse.ArgumentParser) -> None:
    """``--nodes`` (alias ``--nnodes``) and torchrun's ``--nproc-per-node``."""
    parser.add_argument(
        "--nodes", "--nnodes", type=int, default=1, help=f"{NODES_HELP} (default 1)"
    )
    parser.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="N",
        help="ranks per node, as torchrun means it: starts N × --nodes ranks in total "
        "(instead of --nproc)",
    )


def resolve_nproc(args: argparse.Namespace) -> None:
    """Turn ``--nproc-per-node N`` into ``--nproc`` = N × ``--nodes`` (both given: they
    must agree); ``--nproc`` stays the total number of ranks."""
    per_node = getattr(args, "nproc_per_node", None)
    if per_node is None:
        return
    if per_node < 1 or args.nodes < 1:
        raise UsageError("--nproc-per-node and --nodes must be at least 1")
    total = per_node * args.nodes
    if getattr(args, "nproc_given", False) and args.nproc != total:
        raise UsageError(
            f"--nproc {args.nproc} (ranks in total) disagrees with --nproc-per-node "
            f"{per_node} × --nodes {args.nodes} = {total}; give one of them"
        )
    args.nproc = total


def point_keys() -> dict[str, type]:
    """Run's flags of the job itself (not its run settings): key → type."""
    return {o.dest: o.kind for o in options(RUN) if o.part != "run"}


def point_defaults() -> dict[str, Any]:
    """Run's defaults of :func:`point_keys` (the required model and scheme have none)."""
    return {o.dest: o.defaults[RUN] for o in options(RUN) if o.part != "run" and not o.required}


def model_from_args(args: argparse.Namespace) -> ModelConfig:
    """The preset ``--model`` names, with predict's shape overrides applied (its
    name then ends in ``*``; a new --hidden brings ffn_hidden = 4·hidden but for T5)."""
    cfg = get_preset(args.model)
    overrides = {f: getattr(args, f) for f in SHAPE_OVERRIDES if getattr(args, f, None) is not None}
    if overrides:
        if "hidden" in overrides and "ffn_hidden" not in overrides and cfg.arch != "t5":
            overrides["ffn_hidden"] = 4 * overrides["hidden"]
        cfg = dataclasses.replace(cfg, name=f"{cfg.name}*", **overrides)
    return cfg


def _dims(args: argparse.Namespace, command: str) -> ParallelDims:
    if command == RUN:  # --nproc ranks, laid out as the scheme implies
        return resolve_dims(args.scheme, args.nproc, args.dp, args.tp, args.pp)
    return ParallelDims(args.dp * args.tp * args.pp, dp=args.dp, tp=args.tp, pp=args.pp)


def job_from_args(args: argparse.Namespace, command: str, backend: str | None = None) -> Job:
    """The job ``command``'s parsed flags describe; ``backend`` replaces run's
    ``--backend`` (``auto`` resolved by the caller, which knows the devices)."""
    model = model_from_args(args)
    shape = {o.dest: getattr(args, o.dest) for o in options(command) if o.part == "shape"}
    if shape["seq_len"] is None:
        shape["seq_len"] = model.max_positions
    run = RunSettings()
    if command == RUN:
        values = {o.dest: getattr(args, o.dest) for o in options(RUN) if o.part == "run"}
        run = RunSettings(**{**values, "backend": backend or values["backend"]})
    return Job(model=model, dims=_dims(args, command), run=run, **shape)
