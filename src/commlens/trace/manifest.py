"""The run manifest: ``run.json``, merged from per-rank ``rank-NNNNN.json``.

Each rank writes its own metadata file (atomically) when it starts and when it
finishes; the launcher adds what only it knows (command, exit codes). Every
writer re-merges ``run.json`` under a file lock, so whoever finishes last
leaves a complete manifest, and the reader re-merges anyway.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from commlens.errors import RunFormatError
from commlens.trace.schema import FORMAT_VERSION

MANIFEST = "run.json"
FORMAT_NAME = "commlens-run"

# Environment variables that decide the transport (conventions §5).
TRANSPORT_ENV = (
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "NCCL_NET",
    "NCCL_IB_HCA",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "GLOO_SOCKET_IFNAME",
)


def rank_meta_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank:05d}.json"


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` whole or not at all, inside ``path``'s run directory."""
    from commlens.safefile import write_output

    text = json.dumps(data, indent=1, sort_keys=True, default=str)
    write_output(path, text, within=path.parent)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    with open(run_dir / ".run.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def base_manifest() -> dict[str, Any]:
    """Facts about this machine and software that every manifest carries."""
    from commlens import __version__

    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "commlens_version": __version__,
        "torch_version": torch_version(),
        "python_version": platform.python_version(),
        "created_unix_s": time.time(),
        "env": {k: os.environ[k] for k in TRANSPORT_ENV if k in os.environ},
    }


def torch_version() -> str | None:
    """The installed torch's version, without importing torch (seconds) when it is not loaded."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "__version__"):
        return str(torch.__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunFormatError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise RunFormatError(f"{path}: expected a JSON object")
    return data


def merge_manifest(run_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rebuild ``run.json`` from its current content, ``extra`` and the rank files."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        path = run_dir / MANIFEST
        manifest = read_json(path) if path.exists() else base_manifest()
        if manifest.get("format") != FORMAT_NAME:
            raise RunFormatError(f"{path}: not a commlens run manifest")
        if extra:
            _deep_update(manifest, extra)
        manifest["ranks"] = collect_rank_meta(run_dir)
        for meta in manifest["ranks"].values():
            for key in ("world_size", "backend"):
                if key in meta and key not in manifest:
                    manifest[key] = meta[key]
            if "workload" in meta and "workload" not in manifest:
                manifest["workload"] = meta["workload"]
        write_json_atomic(path, manifest)
        return manifest


def collect_rank_meta(run_dir: Path) -> dict[str, Any]:
    ranks: dict[str, Any] = {}
    for path in sorted(run_dir.glob("rank-*.json")):
        try:
            meta = read_json(path)
        except RunFormatError:
            continue
        if meta.get("format") == FORMAT_NAME + "-rank" and "rank" in meta:
            ranks[str(meta["rank"])] = meta
    return dict(sorted(ranks.items(), key=lambda kv: int(kv[0])))


def _deep_update(target: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value
