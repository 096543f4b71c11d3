"""Where the replay's compiled kernels are cached, and that a cache never breaks a
command (whatif/compiled.py). Each case imports a copy of the package in a child
process (the cache is chosen at import; nothing is compiled here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commlens.whatif import compiled, engine

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json
from commlens.whatif import compiled, engine
cache = getattr(engine.run, "_cache", None)
stats = getattr(engine.run, "stats", None)
print(json.dumps({"sources": compiled.SOURCES, "kind": type(cache).__name__,
                  "path": getattr(stats, "cache_path", None)}))
"""


def probe(package: Path, home: Path) -> dict[str, Any]:
    """Import ``package``'s kernels with ``home`` as HOME (no NUMBA_CACHE_DIR)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(package), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of the package whose kernels' folder cannot hold a cache (as where it is
    installed read-only): its __pycache__ is a file."""
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "commlens", src / "commlens", ignore=shutil.ignore_patterns("__pycache__")
    )
    (src / "commlens" / "whatif" / "__pycache__").write_text("")
    return src


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="kernels not compiled")
def test_kernels_are_cached_in_the_users_folder_where_the_package_is_not_writable(
    package: Path, tmp_path: Path
) -> None:
    found = probe(package, tmp_path / "home")
    assert found["kind"] == "_Cache"
    assert Path(found["path"]).is_relative_to(tmp_path / "home" / ".cache" / "numba")


@pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="kernels not compiled")
def test_without_any_folder_for_a_cache_the_kernels_are_compiled_in_the_process(
    package: Path, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    found = probe(package, tmp_path / "file" / "home")  # no ~/.cache can be made
    assert found["kind"] == "NullCache" and found["path"] is None


def test_a_cached_kernel_is_taken_only_while_every_kernel_module_is_unchanged(
    package: Path, tmp_path: Path
) -> None:
    before = probe(package, tmp_path / "home")["sources"]
    assert before == compiled.SOURCES
    links = package / "commlens" / "whatif" / "links.py"  # a module engine.run calls into
    links.write_text(links.read_text() + "\n# changed\n")
    assert probe(package, tmp_path / "home")["sources"] != before
    if os.environ.get("NUMBA_DISABLE_JIT") != "1":
        assert engine.run._cache._cache_file._source_stamp[1] == compiled.SOURCES


class Broken:
    """A numba cache whose files cannot be read or written."""

    def __init__(self, index: Path) -> None:
        self._cache_file = type("Index", (), {"_index_path": str(index)})()

    def load_overload(self, *args: Any) -> Any:
        raise EOFError("truncated")

    def save_overload(self, *args: Any) -> None:
        raise PermissionError("read-only")


def test_a_cache_that_cannot_be_read_or_written_is_compiled_around(tmp_path: Path) -> None:
    index = tmp_path / "engine.run-1.py311.nbi"
    index.write_bytes(b"garbage")
    cache = compiled._Cache(Broken(index))
    assert cache.load_overload("sig", "target") is None  # compiled instead
    assert not index.exists()  # and written anew once compiled
    cache.save_overload("sig", "result")  # not kept, the command goes on
