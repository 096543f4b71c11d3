"""Read and write files without harming what already sits at the path.

Every file commlens reads whole goes through :func:`read_bytes` (or
:func:`read_text`, :func:`read_json`, :func:`read_toml`): it must be a
regular file (a device, a FIFO, a directory or a socket is refused before it
is opened, so ``/dev/zero`` or a named pipe can neither fill the memory nor
block), no larger than the cap the caller gives for that kind of file; files
inside a run directory are read with ``follow=False``, so a symlink planted
there is refused rather than followed. A failure is an :class:`OSError`
(``strerror`` says why in a few words); text too deeply nested for the parser
is a ``ValueError``.

Every file commlens writes goes through here:

- a regular file, or a path that does not exist yet, is written atomically: a
  temporary file in the same directory, flushed to disk, then renamed over
  the target (which keeps its permission bits); on any failure the temporary
  file is removed and the target is untouched;
- a character device or a FIFO (``-o /dev/null``, ``-o /dev/stdout``, a named
  pipe) is opened for writing and written as it is, never replaced;
- a symlink is followed: what it points to is written by the rules above and
  the link itself stays a link;
- a directory, a block device or a socket is refused.

Every failure is a one-line :class:`UsageError` naming the path. With
``within``, the target (symlinks resolved) must lie under that directory:
commlens's own files in a run or sweep directory never land outside it.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from commlens.errors import UsageError

StrPath = str | os.PathLike[str]


def _fail(path: StrPath, what: str) -> UsageError:
    return UsageError(f"{os.fspath(path)}: {what}")


KiB = 1 << 10
MiB = 1 << 20
SMALL_LIMIT = 16 * MiB
"""A file of a few facts: a node or job file, a profile, a sweep file, a lock holder."""
META_LIMIT = 512 * MiB
"""A run's metadata (``run.json``, a rank's metadata with its steps), a whatif result."""
DATA_LIMIT = 4096 * MiB
"""A rank's flushed events part, a parts directory's event kinds."""


def _not_regular(path: StrPath, mode: int) -> OSError:
    if stat.S_ISLNK(mode):
        return OSError(errno.ELOOP, "is a symlink, which commlens does not follow here", path)
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a named pipe"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    return OSError(errno.EINVAL, f"is {kind}, not a regular file", path)


def _too_large(path: StrPath, limit: int) -> OSError:
    return OSError(
        errno.EFBIG, f"larger than {limit:,} bytes, the most read from such a file", path
    )


def open_regular(path: StrPath, *, follow: bool = True) -> int:
    """A read-only descriptor of the regular file ``path``; an OSError for anything else.

    The kind is checked before the open (a FIFO would block it, a device may
    act on it) and again on the descriptor (the path may change between).
    With ``follow=False`` a symlink is refused.
    """
    mode = os.stat(path, follow_symlinks=follow).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    return _regular_or_closed(os.open(path, flags), path)


def _regular_or_closed(fd: int, path: StrPath, *, truncate: bool = False) -> int:
    """``fd`` when it is a regular file (emptied with ``truncate``); else closed, an OSError."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        if truncate:
            os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_lock(path: StrPath) -> int:
    """A descriptor of the lock file ``path`` (created if missing) to ``flock``.

    Never through a symlink, and only a regular file: a planted link or FIFO
    is an OSError, nothing is created or opened elsewhere.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    return _regular_or_closed(_open_nofollow(path, flags), path)


def _open_nofollow(path: StrPath, flags: int) -> int:
    """``os.open`` with O_NOFOLLOW among ``flags``; a link or a FIFO nobody reads is
    the OSError of :func:`_not_regular`."""
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO nobody reads
            mode = stat.S_IFLNK if exc.errno == errno.ELOOP else stat.S_IFIFO
            raise _not_regular(path, mode) from None
        raise


def open_own(path: StrPath, *, append: bool = False) -> int:
    """A write descriptor of a file commlens keeps inside its own directory.

    Created if missing (else truncated, or appended to with ``append``), never
    through a symlink, and only a regular file: a planted link, FIFO or device
    at ``path`` is an OSError and nothing is written anywhere.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    flags |= os.O_APPEND if append else 0
    return _regular_or_closed(_open_nofollow(path, flags), path, truncate=not append)


def make_own_dir(path: StrPath) -> None:
    """Create the directory ``path`` if missing; an OSError when something else is there.

    A symlink, even to a directory, is refused: commlens writes into its own
    directories only.
    """
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise _not_regular(path, mode) from None
        if not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, "exists and is not a directory", path) from None


def read_bytes(path: StrPath, *, limit: int, follow: bool = True) -> bytes:
    """The whole content of the regular file ``path``, at most ``limit`` bytes.

    An :class:`OSError` when it is not a regular file (or a symlink, with
    ``follow=False``) or holds more than ``limit`` bytes, even one that grows
    while it is read.
    """
    fd = open_regular(path, follow=follow)
    try:
        if os.fstat(fd).st_size > limit:
            raise _too_large(path, limit)
        chunks = []
        got = 0
        while chunk := os.read(fd, min(limit + 1 - got, 1 << 24) or 1):
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise _too_large(path, limit)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: StrPath, *, limit: int, follow: bool = True) -> str:
    """:func:`read_bytes` decoded as UTF-8 (a ``UnicodeDecodeError`` when it is not)."""
    return read_bytes(path, limit=limit, follow=follow).decode("utf-8")


def parse_json(text: str | bytes) -> Any:
    """``json.loads``; text nested too deeply is a ``ValueError`` like any bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def parse_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads``; text nested too deeply is a ``TOMLDecodeError`` like any bad TOML."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError("nested too deeply") from None


def read_json(path: StrPath, *, limit: int, follow: bool = True) -> Any:
    """The JSON value in ``path`` (read by :func:`read_bytes`); a ValueError for bad JSON."""
    return parse_json(read_bytes(path, limit=limit, follow=follow))


def read_toml(path: StrPath, *, limit: int = SMALL_LIMIT, follow: bool = True) -> dict[str, Any]:
    """The TOML table in ``path`` (read by :func:`read_text`)."""
    return parse_toml(read_text(path, limit=limit, follow=follow))


def cannot_write(path: StrPath, exc: OSError) -> UsageError:
    """The one-line error for an OSError met while writing ``path``."""
    return _fail(path, f"cannot write ({exc.strerror or exc})")


def check_within(path: StrPath, root: StrPath) -> Path:
    """``path`` with symlinks resolved; a UsageError unless it lies under ``root``."""
    real = Path(os.path.realpath(path))
    top = Path(os.path.realpath(root))
    if real != top and top not in real.parents:
        raise _fail(path, f"resolves to {real}, outside {os.fspath(root)}; refusing to write")
    return real


def refuse_inside(path: StrPath, inputs: Sequence[StrPath]) -> None:
    """A UsageError when writing ``path`` would land on one of ``inputs`` or inside one
    (symlinks resolved): an output never overwrites what its command reads."""
    real = Path(os.path.realpath(path))
    for given in inputs:
        top = Path(os.path.realpath(given))
        if real == top or top in real.parents:
            raise _fail(
                path,
                f"lies in {os.fspath(given)}, which this command reads; refusing to write "
                "there (pick a path outside it)",
            )


def resolve_target(path: StrPath, within: StrPath | None = None) -> tuple[Path, bool]:
    """(the path to write, whether it is written in place rather than replaced).

    A one-line UsageError for a target that cannot be written at all.
    """
    shown = os.fspath(path)
    if not shown:
        raise UsageError("an empty path cannot be written")
    real = check_within(path, within) if within is not None else Path(os.path.realpath(path))
    try:
        # os.stat follows links the way open() does (also /dev/stdout -> pipe:[N])
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise cannot_write(shown, exc) from None
    if mode is None or stat.S_ISREG(mode):
        if not real.parent.is_dir():
            raise _fail(shown, f"directory {Path(shown).parent} does not exist")
        return real, False
    if stat.S_ISDIR(mode):
        raise _fail(shown, "is a directory; give a file name")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return Path(path), True
    kind = "a block device" if stat.S_ISBLK(mode) else "not a regular file"
    raise _fail(shown, f"is {kind}; refusing to write to it")


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _temp_name(real: Path) -> Path:
    return real.with_name(f".{real.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _match_old(fd: int, real: Path) -> None:
    """Give the new file the permission bits (and, as root, the owner) of the old one."""
    try:
        old = os.stat(real)
    except OSError:
        return
    os.fchmod(fd, stat.S_IMODE(old.st_mode))
    if os.geteuid() == 0:
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            pass


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def replacing(path: StrPath, *, within: StrPath | None = None) -> Iterator[Path]:
    """A temporary path to write instead of ``path``; renamed over it when the block ends.

    For writers that need a file name (a database). The target must be a
    regular file or absent. The temporary file (and anything named after it
    plus a suffix, such as a journal) is removed if the block fails.
    """
    real, in_place = resolve_target(path, within)
    if in_place:
        raise _fail(path, "is not a regular file; refusing to replace it")
    tmp = _temp_name(real)
    try:
        yield tmp
        os.replace(tmp, real)
    except OSError as exc:
        raise cannot_write(path, exc) from None
    finally:
        _remove(tmp)
        for leftover in real.parent.glob(tmp.name + ".*"):
            _remove(leftover)


@contextmanager
def _open(path: StrPath, binary: bool, within: StrPath | None, fsync: bool) -> Iterator[IO[Any]]:
    real, in_place = resolve_target(path, within)
    if in_place:  # a device or FIFO: write into it as it is
        try:
            fd = os.open(real, os.O_WRONLY | os.O_NOCTTY)
        except OSError as exc:
            raise cannot_write(path, exc) from None
        with _wrapped(path, fd, binary) as fh:
            yield fh
        return
    tmp = _temp_name(real)
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exc:
            raise cannot_write(path, exc) from None
        _match_old(fd, real)
        with _wrapped(path, fd, binary) as fh:
            yield fh
            try:
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise cannot_write(path, exc) from None
        try:
            os.replace(tmp, real)
        except OSError as exc:
            raise cannot_write(path, exc) from None
        if fsync:
            _sync_dir(real.parent)
    finally:
        _remove(tmp)


@contextmanager
def _wrapped(path: StrPath, fd: int, binary: bool) -> Iterator[IO[Any]]:
    """The file object of ``fd``; an OSError inside (ENOSPC, EIO) becomes one line."""
    fh: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
    try:
        with fh:
            yield fh
    except OSError as exc:
        raise cannot_write(path, exc) from None


@contextmanager
def open_text(
    path: StrPath, *, within: StrPath | None = None, fsync: bool = True
) -> Iterator[IO[str]]:
    """A UTF-8 text file to write ``path`` by the rules above; kept if the block ends well."""
    with _open(path, False, within, fsync) as fh:
        yield fh


@contextmanager
def open_binary(
    path: StrPath, *, within: StrPath | None = None, fsync: bool = True
) -> Iterator[IO[bytes]]:
    """A binary file to write ``path`` by the rules above; kept if the block ends well."""
    with _open(path, True, within, fsync) as fh:
        yield fh


def write_output(
    path: StrPath, data: str | bytes, *, within: StrPath | None = None, fsync: bool = True
) -> Path:
    """Write ``data`` whole to ``path`` by the rules above; returns ``path``."""
    if isinstance(data, str):
        with open_text(path, within=within, fsync=fsync) as fh:
            fh.write(data)
    else:
        with open_binary(path, within=within, fsync=fsync) as fb:
            fb.write(data)
    return Path(path)


def make_dir(path: StrPath, *, within: StrPath | None = None) -> Path:
    """Create directory ``path`` (and its parents) if missing; a one-line error if it cannot."""
    p = Path(path)
    if within is not None:
        check_within(p, within)
    if p.exists() and not p.is_dir():
        raise _fail(p, "exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(p, f"cannot create directory ({exc.strerror or exc})") from None
    return p
