"""The sources of ``commlens import`` as local files: directories, globs, archives.

A source is a file (``.gz`` read as it is, decompressed while streaming), a
directory (its files, recursively, hidden ones left out), a glob, or a
``.tar.gz``/``.tgz``/``.tar`` of a trace folder (its regular members
extracted into a scratch directory the caller owns; names that would leave
it are refused). Every file gets its sha256 for the manifest.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import IO

from commlens.errors import UsageError
from commlens.importers.model import SourceFile

_ARCHIVES = (".tar.gz", ".tgz", ".tar")
_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20


class SourceError(UsageError):
    """A source file that cannot be read as what it claims to be."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def is_archive(path: Path) -> bool:
    return path.name.endswith(_ARCHIVES)


def expand_sources(args: list[str], scratch: Path) -> dict[Path, SourceFile]:
    """Local file -> the file as given, for every source argument, in order."""
    out: dict[Path, SourceFile] = {}
    seen: dict[str, str] = {}  # real path -> the file as given
    for arg in args:
        matches = sorted(glob.glob(arg, recursive=True)) if glob.has_magic(arg) else [arg]
        if not matches:
            raise UsageError(f"{arg}: matches no file")
        for match in matches:
            path = Path(match)
            if path.is_dir():
                files = [p for p in sorted(path.rglob("*")) if p.is_file() and not _hidden(p, path)]
                if not files:
                    raise UsageError(f"{path}: an empty directory")
            elif path.is_file():
                files = [path]
            else:
                raise UsageError(f"{path}: {_what_else(path)}")
            for file in files:
                real = os.path.realpath(file)
                if real in seen:
                    raise UsageError(f"{file} is given twice (also as {seen[real]})")
                seen[real] = str(file)
                if is_archive(file):
                    out.update(_extract(file, scratch / f"archive-{len(out)}"))
                else:
                    out[file] = SourceFile(str(file), sha256_of(file), file.stat().st_size)
    return out


def _what_else(path: Path) -> str:
    """Why ``path``, neither a folder nor a regular file, is no source."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a broken link" if path.is_symlink() else "no such file or directory"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    kind = (
        "a named pipe"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    return f"is {kind}, not a trace file"


def _hidden(path: Path, top: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(top).parts)


def _extract(archive: Path, into: Path) -> dict[Path, SourceFile]:
    """The regular members of ``archive``, extracted under ``into``."""
    out: dict[Path, SourceFile] = {}
    into.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = Path(member.name)
                if not member.isfile() or name.is_absolute() or ".." in name.parts:
                    continue
                if any(part.startswith(".") or part.startswith("._") for part in name.parts):
                    continue  # macOS resource forks, hidden files
                target = into / name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                if src is None:
                    continue
                digest = hashlib.sha256()
                with src, open(target, "wb") as dst:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        dst.write(chunk)
                out[target] = SourceFile(str(archive), digest.hexdigest(), member.size, member.name)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise SourceError(f"{archive}: not a readable tar archive ({_one_line(exc)})") from None
    if not out:
        raise UsageError(f"{archive}: the archive holds no file")
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:120] or type(exc).__name__


def open_binary(path: Path) -> IO[bytes]:
    """``path`` for reading, gunzipped while read when it is gzip (by its magic)."""
    fh = open(path, "rb")
    if fh.read(2) == _GZIP_MAGIC:
        fh.seek(0)
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    fh.seek(0)
    return fh


def head(path: Path, size: int = 65536) -> bytes:
    """The first ``size`` bytes of ``path``'s content (decompressed); a one-line
    :class:`SourceError` for a file that cannot be read (a gzip cut short)."""
    try:
        with open_binary(path) as fh:
            return fh.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise read_error(path, exc) from None


def head_text(path: Path, size: int = 65536) -> str:
    return head(path, size).decode("utf-8", errors="replace")


def read_error(path: Path, exc: BaseException) -> SourceError:
    """The one line for a file that failed while read (a truncated gzip, bad bytes)."""
    if isinstance(exc, EOFError) or (isinstance(exc, gzip.BadGzipFile)):
        return SourceError(f"{path}: truncated or damaged gzip ({_one_line(exc)})")
    if isinstance(exc, zlib.error):
        return SourceError(f"{path}: damaged gzip ({_one_line(exc)})")
    return SourceError(f"{path}: cannot read ({_one_line(exc)})")


def text_lines(path: Path) -> io.TextIOWrapper:
    """``path`` as text lines (gunzipped when gzip), undecodable bytes replaced."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace")
