"""The parallel layout: dp × tp × pp = world size, Megatron rank order, and the
layout each scheme implies.

Ranks are laid out with tensor parallelism innermost (neighbouring ranks, so
a TP group stays inside a node), then data parallelism, then pipeline stages
outermost: ``rank = pp_idx·(dp·tp) + dp_idx·tp + tp_idx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.errors import UsageError

ROLES = ("dp", "tp", "pp")
SCHEMES = ("dp", "zero1", "zero2", "zero3", "tp", "pp", "3d")
DATA_PARALLEL = ("dp", "zero1", "zero2", "zero3")
"""Schemes of pure data parallelism (tp = pp = 1)."""


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


def _or_rest(degree: int | None) -> int:
    return -1 if degree is None else degree


def resolve_dims(
    scheme: str, nproc: int, dp: int | None = None, tp: int | None = None, pp: int | None = None
) -> ParallelDims:
    """The layout a scheme implies on ``nproc`` ranks, checking explicit degrees.

    dp and zero*: all ranks data-parallel. tp: all ranks tensor-parallel unless
    --tp/--dp say otherwise (dp × tp). pp: likewise with stages. 3d: --dp, --tp,
    --pp, one of them may be left out (it takes the rest).
    """
    if scheme not in SCHEMES:
        raise UsageError(f"unknown scheme {scheme!r}; choose one of {', '.join(SCHEMES)}")
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    given = {"dp": dp, "tp": tp, "pp": pp}
    if scheme in DATA_PARALLEL:
        for role in ("tp", "pp"):
            if given[role] not in (None, 1):
                raise UsageError(
                    f"scheme {scheme} is pure data parallelism; use --scheme 3d for --{role}"
                )
        return ParallelDims(nproc, dp=_or_rest(dp), tp=1, pp=1)
    if scheme == "tp":
        if pp not in (None, 1):
            raise UsageError("scheme tp has no pipeline stages; use --scheme 3d for --pp")
        if tp is None:
            return ParallelDims(nproc, dp=1 if dp is None else dp, tp=-1, pp=1)
        return ParallelDims(nproc, dp=_or_rest(dp), tp=tp, pp=1)
    if scheme == "pp":
        if tp not in (None, 1):
            raise UsageError("scheme pp has no tensor parallelism; use --scheme 3d for --tp")
        if pp is None:
            return ParallelDims(nproc, dp=1 if dp is None else dp, tp=1, pp=-1)
        return ParallelDims(nproc, dp=_or_rest(dp), tp=1, pp=pp)
    missing = [role for role, value in given.items() if value is None]
    if len(missing) > 1:
        raise UsageError(
            "scheme 3d needs at least two of --dp, --tp, --pp (the third takes the rest)"
        )
    return ParallelDims(nproc, dp=_or_rest(dp), tp=_or_rest(tp), pp=_or_rest(pp))
