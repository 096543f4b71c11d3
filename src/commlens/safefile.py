"""Write files without harming what already sits at the path.

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

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from commlens.errors import UsageError

StrPath = str | os.PathLike[str]


def _fail(path: StrPath, what: str) -> UsageError:
    return UsageError(f"{os.fspath(path)}: {what}")


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
