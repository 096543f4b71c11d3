"""The analytical model beside each point: validation, and predictions per network.

- :func:`validate_point`: ``commlens validate`` of the point's run (counts
  exact, bytes within the tolerance, step 0 left out).
- :func:`predict_point`: the point's own job timed on each network profile
  (and on the emulated link it ran on), with the compute time the run
  achieved, so the predicted step is comparable with the measured one.
- :func:`predict_scale`: the same scheme at the studies' scale (a large
  preset on 8 GPUs in 2 nodes by default) on the studies' networks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from commlens.errors import CommlensError, UsageError
from commlens.job.models import get_preset
from commlens.job.parallel import resolve_dims
from commlens.job.spec import Job
from commlens.predict.forecast import DEFAULT_TFLOPS, predict
from commlens.predict.networks import network_profile
from commlens.predict.profiles import NetworkProfile


def validate_point(run_dir: Path, tolerance: float) -> dict[str, Any]:
    """``{"ok": bool, "summary": str, "mismatches": int}`` for the run."""
    from commlens.predict.validate import validate_run
    from commlens.trace.reader import load_run

    try:
        result = validate_run(load_run(run_dir), tolerance)
    except CommlensError as exc:
        return {"ok": False, "summary": f"not validated: {exc}", "mismatches": 0}
    if result.ok:
        held = len(result.checks)
        summary = f"{held} (op, role, rank, step) checks within {tolerance:.0%}"
    else:
        bad = sorted({f"{c.op}/{c.role or '-'}" for c in result.failures})
        first = result.failures[0]
        summary = (
            f"mismatch in {', '.join(bad)} (e.g. rank {first.rank} step {first.step}: "
            f"{first.reason})"
        )
    return {"ok": result.ok, "summary": summary, "mismatches": len(result.failures)}


def _rows(
    job: Job, profiles: list[NetworkProfile], gpus_per_node: int, tflops: float, scale: str
) -> list[dict[str, Any]]:
    pred = predict(job, profiles, gpus_per_node=gpus_per_node, tflops=tflops)
    out = []
    for est, speedup in zip(pred.networks, pred.speedups(), strict=True):
        out.append(
            {
                "scale": scale,
                "model": job.model.name,
                "dp": job.dims.dp,
                "tp": job.dims.tp,
                "pp": job.dims.pp,
                "network": est.name,
                "comm_s": est.comm_time_s,
                "compute_s": est.compute_time_s,
                "step_s": est.step_time_s,
                "step_overlap_s": est.step_time_overlap_s,
                "comm_share": est.comm_share,
                "speedup": speedup,
                "wire_bytes_per_rank_step": float(sum(c.wire_bytes for c in pred.calls)),
            }
        )
    return out


def predict_point(
    manifest: dict[str, Any],
    networks: list[str],
    tflops_per_rank: float,
    nodes: int = 1,
    link: str | None = None,
) -> list[dict[str, Any]]:
    """The point's job on each profile in ``networks`` (and on ``link``, its own shaped
    link, when it ran on ``nodes`` > 1 emulated nodes)."""
    job = Job.from_dict(manifest.get("workload") or {})
    # on loopback, as if each rank were a node of its own (so the network matters)
    gpus_per_node = job.dims.world_size // nodes if nodes > 1 else 1
    profiles = [network_profile(n) for n in networks]
    if nodes > 1 and link:
        profiles.append(network_profile(link, label=f"emulated-{link}"))
    tflops = tflops_per_rank if tflops_per_rank > 0 else DEFAULT_TFLOPS
    return _rows(job, profiles, gpus_per_node, tflops, "point")


def scaled_job(point: dict[str, Any], scale: Any) -> Job | None:
    """The point's scheme at the studies' scale, or None when its model has no mapping."""
    preset = scale.models.get(point["model"])
    if preset is None:
        return None
    degrees = dict(scale.schemes.get(point["scheme"], {}))
    scheme = str(degrees.get("scheme", point["scheme"]))
    dims = resolve_dims(
        scheme, scale.nproc, degrees.get("dp"), degrees.get("tp"), degrees.get("pp")
    )
    return Job(
        model=get_preset(preset),
        scheme=scheme,
        dims=dims,
        seq_len=scale.seq_len,
        micro_batch=scale.micro_batch,
        microbatches=int(degrees.get("microbatches", 1)),
        dtype="bf16",
        sequence_parallel=bool(degrees.get("sequence_parallel", False)),
    )


def predict_scale(point: dict[str, Any], scale: Any) -> list[dict[str, Any]]:
    """Predictions of the point's scheme at the studies' scale ([] without a mapping).

    A model without pipeline stages (T5) takes the pipeline degree as data
    parallelism instead (e.g. Megatron's tp 4 × pp 2 becomes tp 4 × dp 2).
    """
    try:
        job = scaled_job(point, scale)
    except UsageError:
        degrees = dict(scale.schemes.get(point["scheme"], {}))
        if int(degrees.get("pp", 1)) <= 1:
            raise
        degrees["dp"] = int(degrees.get("dp", 1)) * int(degrees.pop("pp"))
        folded = dataclasses.replace(scale, schemes={**scale.schemes, point["scheme"]: degrees})
        job = scaled_job(point, folded)
    if job is None:
        return []
    profiles = [network_profile(n) for n in scale.networks]
    return _rows(job, profiles, scale.gpus_per_node, DEFAULT_TFLOPS, "study")
