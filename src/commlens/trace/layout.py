"""The names of a run directory's files: the one place they are spelled.

A run directory holds

- ``run.json``: the merged manifest (:mod:`commlens.trace.manifest`), and
  ``.run.lock``, the lock its writers take, and ``.run.live``, held by every
  process still writing the run (never a run's content);
- per rank ``rank-NNNNN.json`` (the rank's metadata) and ``rank-NNNNN.parquet``
  (its events), rank numbers zero-padded to at least five digits;
- per rank that has not finished, ``.rank-NNNNN.parts/``: its flushed parts
  (``sites.jsonl`` and ``part-NNNNNN.bin``, named by :mod:`commlens.trace.packed`);
- per rank ``inflight-NNNNN.json``: the rank's ops in flight, as of its last
  checkpoint (rewritten by the writer thread when they change), and
  ``stacks-NNNNN.txt``: its threads' Python stacks, written when the hang
  watchdog asked for them;
- per rank ``callsites-NNNNN.jsonl`` and ``callsites-NNNNN.bin``: where each of its
  ops was called, an interned table of call sites and one site id per op
  (:mod:`commlens.trace.callsites`), in a run commlens captured;
- per rank ``kernels-NNNNN.parquet`` in a run imported from GPU profiler traces:
  its device's kernels and its CPU syncs (:mod:`commlens.trace.kernels`);
- ``nic.parquet``: NIC byte counters, when ``commlens.netem`` sampled them;
- for a job of several nodes (:mod:`commlens.trace.nodes`): ``job.json``, the
  job's identity and node slots, and per slot ``node-NNNNN.json``, what that
  node's ``commlens trace`` knows (host, command, exit status), each written
  only by that node; ``.join.lock``, a directory that serialises the nodes'
  joining (invisible to every content check);
- temporary files of the above while they are written.

Writers, readers and ``--force`` (:mod:`commlens.trace.rundir`) all take the
names and patterns from here.
"""

from __future__ import annotations

import re
from pathlib import Path

from commlens.trace.packed import SITES_FILE

MANIFEST = "run.json"
MANIFEST_LOCK = ".run.lock"
LIVE_LOCK = ".run.live"
"""Held (``flock``) by every process writing the run: :mod:`commlens.trace.live`."""
NIC_FILE = "nic.parquet"
JOB_FILE = "job.json"
JOIN_LOCK = ".join.lock"
"""A directory (``os.mkdir`` is atomic, on NFS too); names starting so are never a run's content."""
NODE_GLOB = "node-*.json"
NODE_FILE = re.compile(r"^node-(\d{5,})\.json$")
"""A node slot's file; group 1 is the slot."""
RANK_META_GLOB = "rank-*.json"
RANK_EVENTS_GLOB = "rank-*.parquet"

RANK_EVENTS = re.compile(r"^rank-(\d{5,})\.parquet$")
"""A rank's events file; group 1 is the rank."""
PARTS_DIR = re.compile(r"^\.rank-(\d{5,})\.parts$")
"""A rank's parts directory; group 1 is the rank."""

_OWN = (
    r"run\.json|rank-\d{5,}\.(parquet|json)|inflight-\d{5,}\.json|stacks-\d{5,}\.txt"
    r"|callsites-\d{5,}\.(jsonl|bin)|nic\.parquet|job\.json|node-\d{5,}\.json|kernels-\d{5,}\.parquet"
)
OWN_FILES = re.compile(
    rf"^({_OWN}|\.run\.lock|\.run\.live)$"
    # temporary files of the above: ".NAME.PID[.TOKEN].tmp", ".NAME.tmp", "NAME.tmp"
    rf"|^\.?({_OWN})(\.[0-9a-f]+)*\.tmp$"
)
"""Files a run directory holds that commlens wrote."""
OWN_DIRS = PARTS_DIR
"""Directories of a run that commlens wrote (a rank's flushed parts)."""
PART_FILES = re.compile(
    rf"^({re.escape(SITES_FILE)}|part-\d+\.(bin|tmp)|\.part-\d+\.bin(\.[0-9a-f]+)*\.tmp)$"
)
"""Files of a parts directory."""


def rank_events_name(rank: int) -> str:
    return f"rank-{rank:05d}.parquet"


def rank_file(run_dir: Path, rank: int) -> Path:
    """``rank``'s events file in ``run_dir``."""
    return run_dir / rank_events_name(rank)


def rank_meta_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s metadata file in ``run_dir``."""
    return run_dir / f"rank-{rank:05d}.json"


def kernels_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s kernels and CPU syncs, in a run imported from GPU profiler traces
    (:mod:`commlens.trace.kernels`)."""
    return run_dir / f"kernels-{rank:05d}.parquet"


def inflight_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s ops in flight at its last checkpoint."""
    return run_dir / f"inflight-{rank:05d}.json"


def stacks_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s Python stacks, dumped when the hang watchdog signalled it."""
    return run_dir / f"stacks-{rank:05d}.txt"


def callsites_paths(run_dir: Path, rank: int) -> tuple[Path, Path]:
    """``rank``'s table of call sites and its (seq, site id) records."""
    return run_dir / f"callsites-{rank:05d}.jsonl", run_dir / f"callsites-{rank:05d}.bin"


INFLIGHT_FILE = re.compile(r"^inflight-(\d{5,})\.json$")
STACKS_FILE = re.compile(r"^stacks-(\d{5,})\.txt$")


def node_path(run_dir: Path, slot: int) -> Path:
    """Node slot ``slot``'s file in ``run_dir``."""
    return run_dir / f"node-{slot:05d}.json"


def parts_dir(run_dir: Path, rank: int) -> Path:
    """``rank``'s directory of flushed parts in ``run_dir``."""
    return run_dir / f".rank-{rank:05d}.parts"


def manifest_probe(run_dir: Path, pid: int) -> Path:
    """A temporary file named like the manifest's own (``--force`` may remove it)."""
    return run_dir / f".{MANIFEST}.{pid}.tmp"
