"""The studies' communication findings, from the analytical model alone.

    python examples/predict_study.py

Prints, and `tests/predict/test_study.py` asserts:

1. Study B: ZeRO-3 moves 1.5x the volume of DP across the GPT-NeoX ladder
   (ZeRO-1 and ZeRO-2 as much as DP in the textbook; what the workloads
   issue for ZeRO-1 adds a broadcast of every parameter).
2. Study B: DP volume does not depend on the sequence length; TP and PP
   volume grow linearly with it.
3. Study A: a data-parallel gpt-1.3b on 8 ranks over two nodes runs several
   times faster on rdma-100g than on tcp-10g, while model-parallel layouts
   (TP inside a node, PP across nodes) gain much less.
"""

from __future__ import annotations

from commlens.job import ParallelDims, get_preset
from commlens.job.spec import Job
from commlens.predict.calls import aggregate
from commlens.predict.forecast import Prediction, predict
from commlens.predict.profiles import get_profile, get_profiles
from commlens.predict.textbook import textbook_calls

LADDER = (
    "gpt-19m",
    "gpt-49m",
    "gpt-125m",
    "gpt-350m",
    "gpt-760m",
    "gpt-1.3b",
    "gpt-2.7b",
    "gpt-6.7b",
    "gpt-13b",
)


def wire_bytes(job: Job, textbook: bool = False, convention: str = "ring") -> float:
    """Per-rank per-step bytes on the wire of the busiest modelled rank."""
    pred = predict(job)
    calls = textbook_calls(job, pred.shown_rank) if textbook else pred.calls
    vols = aggregate(calls)
    return sum(v.wire_bytes if convention == "ring" else v.wire_bytes_b for v in vols)


def zero_ratios(model: str, dp: int = 8, seq_len: int = 2048) -> dict[str, float]:
    """Wire volume of each ZeRO stage over DP's, exact and textbook."""
    out = {}
    dims = ParallelDims(dp)
    base = {
        tb: wire_bytes(Job(get_preset(model), "dp", dims, seq_len, dtype="bf16"), tb)
        for tb in (False, True)
    }
    for scheme in ("zero1", "zero2", "zero3"):
        job = Job(get_preset(model), scheme, dims, seq_len, dtype="bf16")
        out[scheme] = wire_bytes(job) / base[False]
        out[f"{scheme} (textbook)"] = wire_bytes(job, textbook=True) / base[True]
    return out


def volume_by_seq_len(
    model: str, scheme: str, dims: ParallelDims, seq_lens: tuple[int, ...], **kw: object
) -> list[float]:
    return [
        wire_bytes(Job(get_preset(model), scheme, dims, s, dtype="bf16", **kw))  # type: ignore[arg-type]
        for s in seq_lens
    ]


STUDY_A_LAYOUTS = {
    # name: (scheme, dims, microbatches, sequence parallel) — MP as Megatron runs it:
    # TP inside a node with sequence parallelism, so a stage sends [s/tp, b, h]
    "DP (dp=8)": ("dp", ParallelDims(8), 1, False),
    "MP (tp=4 in node, pp=2 across)": ("3d", ParallelDims(8, dp=1, tp=4, pp=2), 16, True),
    "PP (pp=8)": ("pp", ParallelDims(8, dp=1, tp=1, pp=8), 16, False),
}


def study_a(model: str = "gpt-1.3b", gpus_per_node: int = 4) -> dict[str, Prediction]:
    """Predictions of Study A's layouts on tcp-10g, ipoib-100g and rdma-100g."""
    nets = get_profiles("tcp-10g,ipoib-100g,rdma-100g")
    out = {}
    for name, (scheme, dims, k, sp) in STUDY_A_LAYOUTS.items():
        job = Job(
            get_preset(model),
            scheme,
            dims,
            seq_len=2048,
            micro_batch=1,
            microbatches=k,
            dtype="bf16",
            sequence_parallel=sp,
        )
        out[name] = predict(job, nets, intra=get_profile("nvlink"), gpus_per_node=gpus_per_node)
    return out


def main() -> None:
    print("1. ZeRO wire volume / DP wire volume (dp=8, bf16), exact for the workloads | textbook")
    for model in LADDER:
        r = zero_ratios(model)
        print(
            f"   {model:9s} zero1 {r['zero1']:.3f} | {r['zero1 (textbook)']:.3f}   "
            f"zero2 {r['zero2']:.3f} | {r['zero2 (textbook)']:.3f}   "
            f"zero3 {r['zero3']:.3f} | {r['zero3 (textbook)']:.3f}"
        )
    seqs = (512, 1024, 2048)
    print(f"2. per-rank wire bytes (MB) at s = {seqs}, gpt-1.3b")
    for label, scheme, dims in (
        ("dp=8", "dp", ParallelDims(8)),
        ("tp=8", "tp", ParallelDims(8, dp=1, tp=8)),
        ("pp=8", "pp", ParallelDims(8, dp=1, pp=8)),
    ):
        vols = volume_by_seq_len("gpt-1.3b", scheme, dims, seqs, microbatches=4)
        print(f"   {label:5s} " + "  ".join(f"{v / 1e6:12,.1f}" for v in vols))
    print("3. Study A: gpt-1.3b on 8 ranks, 4 per node; step time (s) and speedup over tcp-10g")
    for name, pred in study_a().items():
        cells = "  ".join(
            f"{n.name} {n.step_time_s:.3f}s ({x:.2f}x)"
            for n, x in zip(pred.networks, pred.speedups(), strict=True)
        )
        print(f"   {name:32s} {cells}")


if __name__ == "__main__":
    main()
