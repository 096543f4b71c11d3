"""The whatif process's memory settings (commlens.cli.memory): pages of a freed large
array are used again without faulting them in, and a setting the user made is kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys
import numpy as np
from commlens.cli.memory import keep_freed_memory, no_huge_pages
if sys.argv[1] == "tuned":
    keep_freed_memory()
    no_huge_pages()
else:
    from numpy._core import multiarray
    multiarray._set_madvise_hugepage(False)  # 4 KiB pages both ways: faults comparable
a = np.ones(25_000_000)  # 200 MB, faulted in once
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(25_000_000)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _on_glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):  # a C library that does not name itself
        return False


glibc = pytest.mark.skipif(not _on_glibc(), reason="mallopt's settings are glibc's")


def _faults(mode: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "NUMPY_MAD"))}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


@glibc
def test_a_freed_large_array_is_used_again_without_faulting_its_pages_in() -> None:
    pages = 200_000_000 // 4096
    assert _faults("default") > pages // 2  # glibc mapped it anew: every page faulted again
    assert _faults("tuned") < pages // 20


@glibc
def test_a_malloc_setting_the_user_made_is_kept() -> None:
    pages = 200_000_000 // 4096
    assert _faults("tuned", MALLOC_MMAP_MAX_="65536", MALLOC_TRIM_THRESHOLD_="131072") > pages // 2
