"""FSDP1 on real ranks (gloo): every op against torch.profiler, and every group it
uses dp (the groups it names, those of its mesh and those it builds itself)."""

from __future__ import annotations

from pathlib import Path

from tests.distributed import run_ranks
from tests.frameworks import fsdp1_job
from tests.frameworks.observe import recorded_ops, rows

WORLD = 4


def test_fsdp1_full_and_hybrid_shard_groups_are_dp(tmp_path: Path) -> None:
    got = run_ranks(fsdp1_job.job, WORLD, str(tmp_path), timeout=240)
    events = rows(tmp_path, "select rank, pg_name, pg_ranks, role from events")
    for rank, (seen, groups, other) in enumerate(got):
        assert recorded_ops(tmp_path, rank) == seen  # every op, once
        assert len(groups) >= 5  # default; 2 of the tuple; 2 of the mesh; its own
        mine = {(g, tuple(r), role) for k, g, r, role in events if k == rank}
        # Every op on a group FSDP says it uses, with its members, and dp; the
        # group no framework uses keeps no role.
        want = {(g, tuple(r), "dp") for g, r in groups.items()}
        assert mine - want == {(other, tuple(range(WORLD)), "")}
