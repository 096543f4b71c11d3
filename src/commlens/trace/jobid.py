"""Which multi-node job a ``commlens trace`` belongs to, and which node slot it takes.

Every node of a job runs its own ``commlens trace`` with the same ``--out``;
each derives the same job identity from what it is given, so that they can
share one run directory and a different job cannot:

- under Slurm (``SLURM_JOB_ID`` and ``SLURM_STEP_ID`` set, more than one task
  in ``SLURM_NTASKS``): the job step ``JOB.STEP``; one slot per task, the slot
  is ``SLURM_PROCID`` and the node ``SLURM_NODEID``;
- a torchrun (``torchrun`` or ``python -m torch.distributed.run``) with
  ``--nnodes`` above 1: the rendezvous (``--master_addr:--master_port`` for the
  static form, ``--rdzv_endpoint`` and ``--rdzv_id`` for the others) and the
  node count; one slot per node, ``--node_rank`` when given, else the first
  free one (c10d assigns node ranks itself). Options torchrun reads from
  ``PET_<NAME>`` variables count as given.

Anything else is a single-node job (:func:`job_identity` returns None).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.errors import UsageError
from commlens.units import ascii_int

# torchrun options that take no value (every other option does).
_FLAGS = frozenset({"--standalone", "--no-python", "--module", "-m", "--run-path", "--no_python"})
# Slurm's step ids of a batch script, the extern step and an interactive shell (and their names).
_NOT_SRUN_STEPS = frozenset(
    {"batch", "extern", "interactive", "4294967294", "4294967292", "4294967290"}
)
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
MAX_WORLD = 1_000_000
"""The most tasks or nodes a job may have: a run's ranks are bounded the same
(``commlens.trace.schema.MAX_WORLD``; not imported here, to keep pyarrow out of startup)."""


# A rank's launch facts and the variables they are read from, first found wins.
_LAUNCH_ENV = {
    "local_rank": ("LOCAL_RANK", "SLURM_LOCALID"),
    "local_world_size": ("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"),
    "group_rank": ("GROUP_RANK",),
    "slurm_procid": ("SLURM_PROCID",),
    "slurm_nodeid": ("SLURM_NODEID",),
}


@dataclass(frozen=True)
class JobIdentity:
    """One invocation's view of its job."""

    id: str
    """The same string on every node of the job, different for another job."""
    kind: str
    """``slurm``, ``torchrun-static`` or ``torchrun-<rdzv backend>``."""
    slots: int
    """How many ``commlens trace`` invocations the job has."""
    slot: int | None
    """This invocation's slot, or None when the first free one is taken."""
    node: str | None = None
    """The node this invocation runs on (Slurm's node id); None: its slot."""
    facts: dict[str, Any] = field(default_factory=dict)
    """What the identity was derived from, for the manifest."""

    def record(self) -> dict[str, Any]:
        """``job.json``'s content."""
        return {"id": self.id, "kind": self.kind, "slots": self.slots, "facts": self.facts}


def job_identity(cmd: Sequence[str], env: Mapping[str, str]) -> JobIdentity | None:
    """The multi-node job ``cmd`` (run with ``env``) belongs to; None for a single node."""
    return _slurm(env) or _torchrun(cmd, env)


def _int_env(env: Mapping[str, str], name: str) -> int:
    value = env.get(name, "")
    number = ascii_int(value, MAX_WORLD)
    if number is None:
        raise UsageError(
            f"{name}={value[:40]!r} is not a number of 0..{MAX_WORLD:,} (under Slurm, set by srun)"
        )
    return number


def _slurm(env: Mapping[str, str]) -> JobIdentity | None:
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    if not job or not step or "SLURM_NTASKS" not in env or step in _NOT_SRUN_STEPS:
        return None  # a batch script or salloc shell: one process, not one per task
    tasks = _int_env(env, "SLURM_NTASKS")
    if tasks < 2:
        return None
    procid = _int_env(env, "SLURM_PROCID")
    if procid >= tasks:
        raise UsageError(f"SLURM_PROCID={procid} is not below SLURM_NTASKS={tasks}")
    facts = {"job_id": job, "step_id": step, "ntasks": tasks, "nnodes": env.get("SLURM_NNODES")}
    return JobIdentity(
        f"slurm {job}.{step}", "slurm", tasks, procid, env.get("SLURM_NODEID"), facts
    )


def _is_torchrun(cmd: Sequence[str]) -> int | None:
    """Where torchrun's own options start in ``cmd``, or None when it is no torchrun."""
    if cmd and Path(cmd[0]).name == "torchrun":
        return 1
    if len(cmd) >= 3 and Path(cmd[0]).name.startswith("python"):
        if cmd[1] == "-m" and cmd[2] in _TORCHRUN_MODULES:
            return 3
    return None


def torchrun_options(args: Sequence[str]) -> dict[str, str]:
    """torchrun's options before the script, by their underscore names."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if "=" in arg:
            key, value = arg.split("=", 1)
        elif arg in _FLAGS:
            key, value = arg, ""
        elif i + 1 < len(args):
            key, value = arg, args[i + 1]
            i += 1
        else:
            break
        opts[key.lstrip("-").replace("-", "_")] = value
        i += 1
    return opts


def _torchrun(cmd: Sequence[str], env: Mapping[str, str]) -> JobIdentity | None:
    start = _is_torchrun(cmd)
    if start is None:
        return None
    # torchrun takes an option it is not given from PET_<NAME> in its environment
    given = {k[4:].lower(): v for k, v in env.items() if k.startswith("PET_")}
    opts = {**given, **torchrun_options(cmd[start:])}
    nnodes = ascii_int(opts.get("nnodes", "1").split(":")[-1], MAX_WORLD)
    if nnodes is None:
        raise UsageError(f"torchrun --nnodes {opts.get('nnodes', '')[:40]!r} is not a node count")
    if nnodes < 2:
        return None
    backend = opts.get("rdzv_backend", "static")
    if backend == "static":
        endpoint = f"{opts.get('master_addr', '127.0.0.1')}:{opts.get('master_port', '29500')}"
        node_rank = opts.get("node_rank", "0")
        slot: int | None = ascii_int(node_rank, nnodes - 1)
        if slot is None:
            raise UsageError(f"torchrun --node_rank {node_rank[:40]!r} is not in 0..{nnodes - 1}")
        ident = f"torchrun static {endpoint} nnodes={nnodes}"
    else:
        endpoint = opts.get("rdzv_endpoint", "")
        slot = None
        ident = f"torchrun {backend} {endpoint} id={opts.get('rdzv_id', 'none')} nnodes={nnodes}"
    facts = {k: opts[k] for k in sorted(opts) if k.startswith(("nnodes", "master", "rdzv"))}
    return JobIdentity(ident, f"torchrun-{backend}", nnodes, slot, None, facts)


def launch_facts(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Where this rank runs, from its launcher's environment (a rank's ``meta.launch``).

    ``node`` is the node's name in the run's topology: the one ``commlens trace``
    gave (``COMMLENS_NODE``), else torchrun's node rank, Slurm's node id, or the
    host; ``local_rank`` and ``local_world_size`` are torchrun's, else Slurm's.
    """
    env = os.environ if env is None else env
    host = socket.gethostname()
    node = next(
        (env[k] for k in ("COMMLENS_NODE", "GROUP_RANK", "SLURM_NODEID") if env.get(k)), host
    )
    facts: dict[str, Any] = {"host": host, "node": node}
    for name, keys in _LAUNCH_ENV.items():
        value = next((v for k in keys if (v := ascii_int(env.get(k, ""))) is not None), None)
        if value is not None:
            facts[name] = value
    return facts
