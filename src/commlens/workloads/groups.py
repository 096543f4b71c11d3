"""Process groups of a dp × tp × pp layout, each named by its role.

Every rank creates every group in the same order (torch.distributed requires
it) and keeps its own. ``group_desc`` carries the role to capture (dp, tp, pp;
"pp_embedding" for the tied-embedding group of the first and last stage), and
``commlens.set_group_role`` names it explicitly while a capture is active.
Groups of a degree 1 are not created: no communication happens there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed import ProcessGroup

import commlens
from commlens.job.parallel import ParallelDims
from commlens.workloads.tp import TPContext


@dataclass
class Groups:
    """This rank's groups and place in the layout."""

    dims: ParallelDims
    rank: int
    dp: ProcessGroup | None = None
    tp: ProcessGroup | None = None
    pp: ProcessGroup | None = None
    embedding: ProcessGroup | None = None

    @property
    def coords(self) -> dict[str, int]:
        return self.dims.coords(self.rank)

    @property
    def stage(self) -> int:
        return self.coords["pp"]

    @property
    def prev_rank(self) -> int | None:
        """Global rank of the previous pipeline stage (None on the first)."""
        c = self.coords
        return None if c["pp"] == 0 else self.dims.rank_of(c["dp"], c["tp"], c["pp"] - 1)

    @property
    def next_rank(self) -> int | None:
        c = self.coords
        last = c["pp"] == self.dims.pp - 1
        return None if last else self.dims.rank_of(c["dp"], c["tp"], c["pp"] + 1)

    def tp_context(self, sequence_parallel: bool = False) -> TPContext:
        return TPContext(
            size=self.dims.tp,
            rank=self.coords["tp"],
            group=self.tp,
            sequence_parallel=sequence_parallel and self.dims.tp > 1,
        )


def _new_group(ranks: list[int], desc: str, role: str) -> ProcessGroup:
    group = dist.new_group(ranks, group_desc=desc)
    assert group is not None
    set_role = getattr(commlens, "set_group_role", None)
    if set_role is not None and dist.get_rank() in ranks:
        set_role(group, role)
    return group


def build_groups(dims: ParallelDims) -> Groups:
    """Create the dp, tp, pp and embedding groups (call on every rank, same order).

    A one-rank layout needs no process group at all (a plain local run).
    """
    if dims.world_size == 1 and not dist.is_initialized():
        return Groups(dims, 0)
    rank = dist.get_rank()
    assert dist.get_world_size() == dims.world_size
    mine = Groups(dims, rank)
    for role in ("tp", "dp", "pp"):
        if dims.degree(role) == 1:
            continue
        for ranks in dims.groups(role):
            group = _new_group(ranks, role, role)
            if rank in ranks:
                setattr(mine, role, group)
    if dims.pp > 1:
        seen: list[list[int]] = []
        for r in range(dims.world_size):
            ranks = dims.embedding_group(r)
            if ranks not in seen:
                seen.append(ranks)
        for ranks in seen:
            group = _new_group(ranks, "pp_embedding", "pp")
            if rank in ranks:
                mine.embedding = group
    return mine
