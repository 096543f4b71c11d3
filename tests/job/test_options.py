"""The flags of a job derive from the spec: run, predict and the sweep take the same ones."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from commlens.errors import UsageError
from commlens.job import Job, RunSettings, get_preset, resolve_dims
from commlens.job.options import (
    OPTIONS,
    PREDICT,
    RUN,
    add_job_options,
    job_from_args,
    options,
    point_keys,
)
from commlens.sweep.spec import LAUNCH_KEYS, POINT_DEFAULTS, POINT_KEYS

JOB_FIELDS = {f.name for f in dataclasses.fields(Job)} - {"model", "dims", "run"}
RUN_FIELDS = {f.name for f in dataclasses.fields(RunSettings)}


def parse(command: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"commlens {command}")
    add_job_options(parser, command)
    return parser.parse_args(argv)


def actions(command: str) -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser()
    add_job_options(parser, command)
    return {a.dest: a for a in parser._actions if a.dest != "help"}


def test_every_field_of_the_job_is_a_flag_of_both_commands() -> None:
    run, predict = actions(RUN), actions(PREDICT)
    assert JOB_FIELDS | {"model"} <= set(run) & set(predict)
    assert RUN_FIELDS <= set(run) and not RUN_FIELDS & set(predict)
    for dest in set(run) & set(predict):  # one flag, one type, one set of choices, one text
        a, b = run[dest], predict[dest]
        assert a.option_strings == b.option_strings and a.type == b.type
        assert a.choices == b.choices and a.required == b.required
        assert a.help.split(" (")[0] == b.help.split(" (")[0]


def test_each_command_keeps_its_defaults() -> None:
    run = parse(RUN, ["--model", "gpt-tiny", "--scheme", "dp"])
    assert (run.nproc, run.dp, run.tp, run.pp) == (2, None, None, None)
    assert (run.seq_len, run.micro_batch, run.microbatches, run.dtype) == (128, 2, 1, "fp32")
    assert (run.steps, run.warmup_steps, run.seed, run.lr, run.backend) == (
        5,
        1,
        1234,
        1e-3,
        "auto",
    )
    job = job_from_args(parse(PREDICT, ["--model", "gpt-125m", "--scheme", "dp"]), PREDICT)
    assert (job.dims.dp, job.dims.tp, job.dims.pp) == (1, 1, 1)
    assert (job.seq_len, job.micro_batch) == (get_preset("gpt-125m").max_positions, 1)


def test_the_sweep_point_keys_are_runs_flags_of_the_job() -> None:
    assert POINT_KEYS == {**point_keys(), **LAUNCH_KEYS}
    assert set(point_keys()) == JOB_FIELDS | {"model", "nproc", "dp", "tp", "pp"}
    run = parse(RUN, ["--model", "gpt-tiny", "--scheme", "dp"])
    for key, value in POINT_DEFAULTS.items():
        assert key in LAUNCH_KEYS or getattr(run, key) == value


def test_run_flags_describe_the_job_a_run_records() -> None:
    args = parse(
        RUN,
        [
            *("--model", "bert-tiny", "--scheme", "3d", "--nproc", "4", "--tp", "2", "--pp", "2"),
            *("--seq-len", "32", "--microbatches", "2", "--sequence-parallel", "--steps", "3"),
        ],
    )
    job = job_from_args(args, RUN, backend="gloo")
    assert job == Job(
        get_preset("bert-tiny"),
        "3d",
        resolve_dims("3d", 4, tp=2, pp=2),
        seq_len=32,
        micro_batch=2,
        microbatches=2,
        sequence_parallel=True,
        run=RunSettings(steps=3, backend="gloo"),
    )


def test_predict_overrides_the_shape_of_a_preset() -> None:
    args = parse(PREDICT, ["--model", "gpt-125m", "--scheme", "dp", "--hidden", "1536"])
    model = job_from_args(args, PREDICT).model
    assert model.name == "gpt-125m*" and (model.hidden, model.ffn_hidden) == (1536, 6144)
    overrides = {o.dest for o in OPTIONS if o.part == "model"} - {"model"}
    assert overrides <= set(actions(PREDICT)) and not overrides & set(actions(RUN))


@pytest.mark.parametrize(
    ("run_argv", "predict_argv", "manifest", "message"),
    [
        (
            ["--nproc", "2", "--sequence-parallel"],
            ["--dp", "2", "--sequence-parallel"],
            {"sequence_parallel": True},
            "sequence parallelism needs tensor parallelism",
        ),
        (["--seq-len", "4096"], ["--seq-len", "4096"], {"seq_len": 4096}, "exceeds"),
    ],
)
def test_one_validation_for_flags_and_manifests(
    run_argv: list[str], predict_argv: list[str], manifest: dict[str, object], message: str
) -> None:
    base = ["--model", "gpt-tiny", "--scheme", "dp"]
    with pytest.raises(UsageError, match=message) as by_run:
        job_from_args(parse(RUN, [*base, *run_argv]), RUN, backend="gloo")
    with pytest.raises(UsageError, match=message) as by_predict:
        job_from_args(parse(PREDICT, [*base, *predict_argv]), PREDICT)
    section = {"model": "gpt-tiny", "scheme": "dp", "dims": {"world_size": 2}, **manifest}
    with pytest.raises(UsageError, match=message) as by_manifest:
        Job.from_dict(section)
    assert str(by_run.value) == str(by_predict.value) == str(by_manifest.value)


def test_help_names_each_commands_default() -> None:
    run, predict = actions(RUN), actions(PREDICT)
    assert run["seq_len"].help == "tokens per sequence (default 128)"
    assert predict["seq_len"].help.startswith("tokens per sequence (default: the model's")
    assert run["lr"].help == "AdamW learning rate (default 0.001)"
    assert {o.dest for o in options(PREDICT)} == set(predict)


def _run_parser() -> argparse.ArgumentParser:
    from commlens.job.options import add_node_options

    parser = argparse.ArgumentParser(prog="commlens run")
    add_job_options(parser, RUN)
    add_node_options(parser)
    return parser


@pytest.mark.parametrize(
    ("argv", "nproc", "nodes"),
    [
        ([], 2, 1),  # --nproc stays the total
        (["--nproc", "8", "--nodes", "2"], 8, 2),
        (["--nproc-per-node", "4", "--nnodes", "2"], 8, 2),  # torchrun's meaning, converted
        (["--nproc-per-node", "3"], 3, 1),
        (["--nproc", "8", "--nproc-per-node", "4", "--nodes", "2"], 8, 2),  # agreeing
    ],
)
def test_torchrun_aliases_mean_what_torchrun_means(argv: list[str], nproc: int, nodes: int) -> None:
    from commlens.job.options import resolve_nproc

    args = _run_parser().parse_args(["--model", "gpt-tiny", "--scheme", "dp", *argv])
    resolve_nproc(args)
    assert (args.nproc, args.nodes) == (nproc, nodes)


def test_nproc_and_nproc_per_node_that_disagree_are_refused() -> None:
    from commlens.job.options import resolve_nproc

    args = _run_parser().parse_args(
        ["--model", "gpt-tiny", "--scheme", "dp", "--nproc", "4", "--nproc-per-node", "4",
         "--nnodes", "2"]
    )  # fmt: skip
    with pytest.raises(UsageError, match=r"--nproc 4 \(ranks in total\) disagrees"):
        resolve_nproc(args)


def test_help_says_nproc_is_the_total_and_steps_a_count() -> None:
    text = " ".join(_run_parser().format_help().split())
    assert "--nproc NPROC ranks in total, over all emulated nodes" in text
    assert "--nodes NODES, --nnodes NODES" in text and "--nproc-per-node N ranks per node" in text
    assert "how many training steps to run (a count;" in text
