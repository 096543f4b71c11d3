"""The suite's real captured runs, made once per session and shared by every test that
reads one (whatif, report, compare, validate, the README's tour): ``shared_runs``.

Each is made on first use, by the installed ``commlens`` as a user runs it, with
its output kept: ``dp`` and ``pp`` are ``commlens run`` of gpt-tiny on 2 ranks
(3 steps, 16 tokens, micro-batch 2, 2 micro-batches); ``traced`` is ``commlens
trace`` of ``examples/ddp_train.py`` under torchrun on 2 ranks, the README's
``runs/ddp``. Tests read them and never write into them (copy one first).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

RUN_ARGS = ["--model", "gpt-tiny", "--nproc", "2", "--steps", "3", "--seq-len", "16"]
RUN_ARGS += ["--micro-batch", "2", "--microbatches", "2"]
"""``commlens run`` arguments of the ``dp`` and ``pp`` runs (the scheme added)."""
TRACED_SCRIPT = ROOT / "examples" / "ddp_train.py"


@dataclass(frozen=True)
class Captured:
    """A run directory and what its command printed."""

    path: Path
    argv: list[str]
    stdout: str
    stderr: str


def _commlens(out: Path, argv: list[str]) -> Captured:
    proc = subprocess.run(
        [str(BIN / "commlens"), *argv],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, COLUMNS="100"),  # as the README shows its output
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Captured(out, argv, proc.stdout, proc.stderr)


def capture_run(out: Path, scheme: str) -> Captured:
    """``commlens run`` of gpt-tiny on 2 ranks under ``scheme`` (see :data:`RUN_ARGS`)."""
    argv = ["run", *RUN_ARGS, "--scheme", scheme, "--out", str(out)]
    return _commlens(out, argv)


def trace_script(out: Path) -> Captured:
    """``commlens trace`` of the plain DDP example under torchrun (a third-party script)."""
    argv = ["trace", "--out", str(out), "--"]
    argv += [str(BIN / "torchrun"), "--nproc_per_node", "2", str(TRACED_SCRIPT)]
    return _commlens(out, argv)


MAKERS = {
    "dp": lambda root: capture_run(root / "gpt-dp", "dp"),
    "pp": lambda root: capture_run(root / "gpt-pp", "pp"),
    "traced": lambda root: trace_script(root / "ddp"),
}
"""Each run by name, made under a root folder (named as the README's runs)."""


class SharedRuns(Mapping[str, Captured]):
    """The runs of :data:`MAKERS`, each captured when a test first asks for it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, Captured] = {}

    def __getitem__(self, name: str) -> Captured:
        if name not in self.made:
            self.made[name] = MAKERS[name](self.root)
        return self.made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(MAKERS)

    def __len__(self) -> int:
        return len(MAKERS)


@pytest.fixture(scope="session")
def shared_runs(tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    """The session's captured runs (see the module docstring); read, never write."""
    return SharedRuns(tmp_path_factory.mktemp("shared-runs"))
