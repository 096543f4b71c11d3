"""How a command's process takes memory from the system.

Commands over millions of events make and free numpy arrays of tens of MB by the
hundred. Two defaults of this stack then cost more system time than the work
itself takes user time (``whatif`` on 10 M events, a shared 2-core host: 23.6 s
user, 14.2 s system): numpy advises the kernel to back every large array with
transparent huge pages, which a kernel set to compact memory on such a fault
(``defrag`` = ``madvise``) does at each one; and glibc gives every block above
32 MiB its own mapping, unmapped when freed, so the next array faults its pages
in again. docs/whatif.md ("Cost") has the figures.
"""

from __future__ import annotations

import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
"""glibc's ``mallopt`` parameters (malloc.h)."""
KEEP_BYTES = 2**31 - 1
"""Free memory at the heap's top that glibc keeps for the next arrays."""


def no_huge_pages() -> None:
    """Stop numpy advising huge pages for its arrays (as ``NUMPY_MADVISE_HUGEPAGE=0``
    does; a value the user set is kept)."""
    if "NUMPY_MADVISE_HUGEPAGE" in os.environ:
        return
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1
        from numpy.core import multiarray  # type: ignore[no-redef]
    setter = getattr(multiarray, "_set_madvise_hugepage", None)
    if setter is not None:
        setter(False)


def keep_freed_memory() -> None:
    """Have glibc serve large arrays from the heap and keep what is freed for the next
    ones (``MALLOC_MMAP_MAX_=0``, a high ``MALLOC_TRIM_THRESHOLD_``): their pages are
    faulted in once. The price is the heap's freed holes, which a later, larger array
    cannot always reuse (``whatif`` on 19.5 M events of 1,024 ranks: 3.0 GiB at its
    peak against 2.7 without, for 1.7 s of system time against 9.2; docs/whatif.md).
    Nothing where the C library is not glibc, or the user set either variable."""
    if not sys.platform.startswith("linux"):
        return
    if any(name in os.environ for name in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")):
        return
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc
        return
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES)
    mallopt(_M_MMAP_MAX, 0)
