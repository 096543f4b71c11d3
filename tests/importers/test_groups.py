"""Group roles from descriptions, and rank lists the profiler cut short."""

from __future__ import annotations

from commlens.importers.groups import parse_ranks, rebuild_ranks, role_of

# The 30 group descriptions of the 16-rank Megatron MoE dumps (../shared/traces/
# flight_recorder/nvrx-megatron-16rank), with the role of each.
MEGATRON = {
    "DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "MODEL_PARALLEL_GROUP": "tp",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "EMBEDDING_GROUP": "pp",
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "dp",
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": "cp",
    "EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "ep",
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "ep",
    "EXPERT_DATA_PARALLEL_GROUP": "dp",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": "dp",
    "default_pg": "",
}


def test_megatron_and_mesh_roles() -> None:
    assert {d: role_of(d) for d in MEGATRON} == MEGATRON
    assert role_of("mesh_tp") == "tp" and role_of("mesh_dp") == "dp" and role_of("tp") == "tp"
    assert role_of("undefined") == ""


def test_truncated_rank_lists() -> None:
    ranks, cut = parse_ranks("[0, 1, 2, 3]")
    assert ranks == (0, 1, 2, 3) and not cut
    ranks, cut = parse_ranks("[0, 8, 16, ..., 248]")
    assert cut
    assert rebuild_ranks(0, 8, 32) == tuple(range(0, 256, 8))
    assert rebuild_ranks(None, 8, 32) is None
