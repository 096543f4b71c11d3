"""The parallel layout: dp × tp × pp = world size, Megatron rank order.

Ranks are laid out with tensor parallelism innermost (neighbouring ranks, so
a TP group stays inside a node), then data parallelism, then pipeline stages
outermost: ``rank = pp_idx·(dp·tp) + dp_idx·tp + tp_idx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.errors import UsageError

ROLES = ("dp", "tp", "pp")


@dataclass(frozen=True)
class ParallelDims:
    """Degrees of data, tensor and pipeline parallelism over ``world_size`` ranks."""

    world_size: int
    """Number of ranks in the job."""
    dp: int = -1
    """Data-parallel degree; -1 takes what tp and pp leave."""
    tp: int = 1
    """Tensor-parallel degree (ranks that split each layer)."""
    pp: int = 1
    """Pipeline-parallel degree (stages)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise UsageError(f"world size must be at least 1, got {self.world_size}")
        degrees = {"dp": self.dp, "tp": self.tp, "pp": self.pp}
        unknown = [name for name, value in degrees.items() if value == -1]
        if len(unknown) > 1:
            raise UsageError(f"only one of dp/tp/pp may be -1, got {', '.join(unknown)}")
        for name, value in degrees.items():
            if value != -1 and value < 1:
                raise UsageError(f"{name} must be a positive integer or -1, got {value}")
        if unknown:
            known = 1
            for _name, value in degrees.items():
                if value != -1:
                    known *= value
            if self.world_size % known:
                raise UsageError(
                    f"world size {self.world_size} is not divisible by the other degrees ({known})"
                )
            object.__setattr__(self, unknown[0], self.world_size // known)
        if self.dp * self.tp * self.pp != self.world_size:
            raise UsageError(
                f"dp·tp·pp = {self.dp}·{self.tp}·{self.pp} = {self.dp * self.tp * self.pp} "
                f"does not equal the world size {self.world_size}"
            )

    def degree(self, role: str) -> int:
        """The degree of ``role`` ("dp", "tp" or "pp")."""
        if role not in ROLES:
            raise UsageError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return int(getattr(self, role))

    def coords(self, rank: int) -> dict[str, int]:
        """The (dp, tp, pp) indices of ``rank``."""
        if not 0 <= rank < self.world_size:
            raise UsageError(f"rank {rank} is outside 0..{self.world_size - 1}")
        return {
            "tp": rank % self.tp,
            "dp": (rank // self.tp) % self.dp,
            "pp": rank // (self.tp * self.dp),
        }

    def rank_of(self, dp: int, tp: int, pp: int) -> int:
        """The rank at the given indices."""
        return pp * self.dp * self.tp + dp * self.tp + tp

    def groups(self, role: str) -> list[list[int]]:
        """Every group of ``role``, each a sorted list of global ranks."""
        self.degree(role)
        seen: dict[tuple[int, ...], None] = {}
        for rank in range(self.world_size):
            seen.setdefault(tuple(self.group_of(rank, role)), None)
        return [list(group) for group in seen]

    def group_of(self, rank: int, role: str) -> list[int]:
        """The ranks that share ``rank``'s group of ``role``."""
        c = self.coords(rank)
        n = self.degree(role)
        members = []
        for i in range(n):
            idx = dict(c)
            idx[role] = i
            members.append(self.rank_of(idx["dp"], idx["tp"], idx["pp"]))
        return members

    def embedding_group(self, rank: int) -> list[int]:
        """First and last pipeline stage ranks that share ``rank``'s dp/tp indices."""
        c = self.coords(rank)
        first = self.rank_of(c["dp"], c["tp"], 0)
        last = self.rank_of(c["dp"], c["tp"], self.pp - 1)
        return [first] if first == last else [first, last]

    def as_dict(self) -> dict[str, int]:
        return {"world_size": self.world_size, "dp": self.dp, "tp": self.tp, "pp": self.pp}
