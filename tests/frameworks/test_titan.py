"""torchtitan-style jobs from torch's own APIs: tensor + sequence parallel with a loss
metric after the step, FSDP2 with a token count and a loss all-reduce, and a 1F1B
pipeline: every op, and its step, phase and module; each validates."""

from __future__ import annotations

from pathlib import Path

import commlens
from tests.distributed import run_ranks
from tests.frameworks import titan_job
from tests.frameworks.observe import holds_with_gradients, rows, validated
from tests.frameworks.titan_job import STEPS

WORLD = 2


def _windows(run: Path) -> list[int]:
    return [s["step"] for s in commlens.load_run(run).manifest["ranks"]["0"]["steps"]]


def test_tp_sequence_parallel_and_loss_metric(tmp_path: Path) -> None:
    run_ranks(titan_job.tp_sp_job, WORLD, str(tmp_path), timeout=240)
    assert _windows(tmp_path) == [-1, *range(STEPS)]  # the weights' broadcast is set-up
    setup = rows(tmp_path, "select distinct op, step from events where op = 'broadcast'")
    assert setup == [("broadcast", -1)]
    got = rows(
        tmp_path,
        "select rank, step, phase, op, module, count(*) from events "
        "where api = 'functional' group by all order by all",
    )
    for rank in range(WORLD):
        for step in range(STEPS):
            mine = {(p, op, m): n for r, s, p, op, m, n in got if (r, s) == (rank, step)}
            # Sequence parallel: gather before w1, reduce-scatter after w2, in forward...
            assert mine[("forward", "all_gather", "w1")] == 1
            assert mine[("forward", "reduce_scatter", "w2")] == 1
            # ... their transposes in backward, named by a module of the model...
            back = {op for (p, op, m) in mine if p == "backward" and m}
            assert back == {"all_gather", "reduce_scatter"}
            assert mine[("backward", "reduce_scatter", "w1")] == 1  # from w1's input hook
            assert mine[("backward", "all_gather", "w2")] == 1  # w2's output reduce-scatter's
            # ... and the loss metric all-reduced after the optimizer step stays in its step.
            assert mine[("other", "all_reduce", "")] == 1
    code, verdict = validated(tmp_path)  # no data parallelism: no gradient check to form
    assert code == 0 and verdict["ok"], verdict


def test_fsdp2_token_count_and_loss(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_ranks(titan_job.fsdp_job, WORLD, str(run), timeout=240)
    assert _windows(run) == [-1, *range(STEPS)]  # step 0's token count comes before it
    got = rows(
        run,
        "select step, phase, count(*) from events where rank = 0 and op = 'all_reduce' "
        "group by all order by all",
    )
    # The loss is forward in every step; the next batch's token count closes each step.
    want = [(-1, "other", 1)]
    for s in range(STEPS):
        want += [(s, "forward", 1)] + [(s, "other", 1)] * (s < STEPS - 1)
    assert got == want
    holds_with_gradients(run, tmp_path)


def test_pipeline_1f1b_sends_and_receives_by_phase(tmp_path: Path) -> None:
    seen = run_ranks(titan_job.pipeline_job, WORLD, str(tmp_path), timeout=240)
    got = rows(
        tmp_path,
        "select rank, op, count(*) from events group by all order by all",
    )
    for rank in range(WORLD):  # against the profiler: an object send/recv is two c10d calls
        ours: dict[str, int] = {}
        for r, op, n in got:
            if r == rank:
                base = op.removesuffix("_object")
                ours[base] = ours.get(base, 0) + n * (2 if op != base else 1)
        assert ours == seen[rank], (rank, ours, seen[rank])
    # The stages' first exchange (connections, shapes) comes before any forward: set-up.
    assert _windows(tmp_path) == [-1, *range(STEPS)]
    phases = rows(
        tmp_path,
        "select rank, op, phase, count(*) from events where dtype = 'float32' "
        "group by all order by all",
    )
    micro = titan_job.MICROBATCHES * STEPS
    by = {(r, op, p): n for r, op, p, n in phases}
    # Stage 0 sends activations in forward; stage 1 receives them in forward and
    # sends gradients back in backward. None is "other".
    assert by[(0, "send", "forward")] == micro
    assert by[(1, "recv", "forward")] == micro
    assert by[(1, "send", "backward")] == micro
    assert not [k for k in by if k[2] == "other"]
    code, verdict = validated(tmp_path)
    assert code == 0 and verdict["ok"], verdict
    pairs = [e for e in verdict["expectations"] if e["name"] == "every send received as sent"]
    assert len(pairs) == 1 and pairs[0]["formed"] and pairs[0]["ok"], pairs
