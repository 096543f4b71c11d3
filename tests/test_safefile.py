"""Every file commlens writes leaves the user's files safe: devices, FIFOs and
symlinks are written, never replaced; bad targets are one line; no temporary
file is left behind."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.report.document import Column, Document, Section
from commlens.report.markdown import MarkdownRenderer, md_text
from commlens.safefile import open_text, write_output

DATA = Path(__file__).parent / "data"
ROOT = os.geteuid() == 0


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "tiny_run"))


def _char_device(path: Path) -> Path:
    """A copy of /dev/null (character device 1:3) at ``path``."""
    if not ROOT:
        pytest.skip("creating a device node needs root")
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("this machine does not allow device nodes here")
    return path


def _read_fifo(path: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, got


def _no_temp(*dirs: Path) -> None:
    for d in dirs:
        assert not [p.name for p in d.iterdir() if p.name.endswith(".tmp")]


def _one_error_line(err: str, cmd: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"commlens {cmd}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# -- the writer itself ---------------------------------------------------------


def test_regular_file_is_replaced_whole_keeping_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_output(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    _no_temp(tmp_path)


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), open_text(target) as fh:
        fh.write("half")
        raise RuntimeError("renderer failed")
    assert target.read_text() == "old"
    _no_temp(tmp_path)


def test_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    thread, got = _read_fifo(fifo)
    write_output(fifo, b"through the pipe")
    thread.join(10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    _no_temp(tmp_path)


def test_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    real = outside / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_output(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    _no_temp(tmp_path, outside)


def _refuses_a_link_out_of_the_run(tmp_path: Path, write: Callable[[Path], object]) -> Path:
    """Makes ``tmp_path/run`` with ``run.json`` a symlink to a file outside it; checks
    that ``write(run)`` refuses it and leaves that file alone. Returns the run."""
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    (run / "run.json").symlink_to(victim)
    with pytest.raises(UsageError, match="outside"):
        write(run)
    assert victim.read_text() == "keep"
    return run


def test_within_refuses_a_symlink_out_of_the_directory(tmp_path: Path) -> None:
    _refuses_a_link_out_of_the_run(
        tmp_path, lambda run: write_output(run / "run.json", "{}", within=run)
    )


def test_bad_targets_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        write_output(tmp_path, "x")
    with pytest.raises(UsageError, match="does not exist"):
        write_output(tmp_path / "no" / "x.txt", "x")
    assert not (tmp_path / "no").exists()


def test_read_only_file_system_is_one_line_and_no_temp(
    tmp_path: Path, readonly_dir: Callable[[Path], Path]
) -> None:
    ro = readonly_dir(tmp_path / "ro")
    with pytest.raises(UsageError, match=r"cannot write .*[Rr]ead-only"):
        write_output(ro / "x.txt", "x")
    assert list(ro.iterdir()) == []


# -- the commands' -o ----------------------------------------------------------


@pytest.mark.parametrize("cmd", ["report", "export"])
def test_output_into_a_device_keeps_the_device(
    cmd: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = _char_device(tmp_path / "null.txt")
    assert main([cmd, str(tiny), "-o", str(dev)]) == 0
    assert stat.S_ISCHR(dev.lstat().st_mode) and dev.lstat().st_rdev == os.makedev(1, 3)
    _no_temp(tmp_path)


def test_query_output_into_a_fifo_delivers_the_rows(tiny: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    thread, got = _read_fifo(fifo)
    sql = "SELECT count(*) AS n FROM events"
    assert main(["query", str(tiny), sql, "--format", "csv", "-o", str(fifo)]) == 0
    thread.join(10)
    assert got and got[0].decode().split() == ['"n"', "52"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    _no_temp(tmp_path)


def test_markdown_into_a_device_embeds_its_plots(tiny: Path, tmp_path: Path) -> None:
    dev = _char_device(tmp_path / "null.md")
    assert main(["report", str(tiny), "-o", str(dev)]) == 0
    assert stat.S_ISCHR(dev.lstat().st_mode)
    assert not (tmp_path / "null_files").exists()


def test_export_through_a_symlink(tiny: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "trace.json").symlink_to(outside / "t.json")
    assert main(["export", str(tiny), "-o", str(tmp_path / "trace.json")]) == 0
    assert (tmp_path / "trace.json").is_symlink()
    assert (outside / "t.json").read_text().startswith("{")
    _no_temp(tmp_path, outside)


def test_export_to_the_root_directory_is_one_line(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", str(tiny), "-o", "/"]) == 2
    assert "is a directory" in _one_error_line(capsys.readouterr().err, "export")


@pytest.mark.parametrize(
    ("cmd", "name"),
    [("report", "r.html"), ("report", "r.md"), ("export", "t.json"), ("query", "q.csv")],
)
def test_output_on_a_read_only_mount_is_one_line(
    cmd: str,
    name: str,
    tiny: Path,
    tmp_path: Path,
    readonly_dir: Callable[[Path], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ro = readonly_dir(tmp_path / "ro")
    argv = [cmd, str(tiny)] + (["SELECT 1 AS x"] if cmd == "query" else [])
    assert main([*argv, "-o", str(ro / name)]) == 2
    assert "Read-only" in _one_error_line(capsys.readouterr().err, cmd)
    assert list(ro.iterdir()) == []


def test_markdown_assets_on_a_read_only_mount_are_one_line(
    tiny: Path,
    tmp_path: Path,
    readonly_dir: Callable[[Path], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    readonly_dir(tmp_path / "r_files")
    assert main(["report", str(tiny), "-o", str(tmp_path / "r.md")]) == 2
    line = _one_error_line(capsys.readouterr().err, "report")
    assert "r_files" in line and "Read-only" in line
    assert not (tmp_path / "r.md").exists()
    _no_temp(tmp_path)


# -- Markdown escaping -----------------------------------------------------------


def test_markdown_escapes_html_and_markup_from_run_data() -> None:
    evil = "<script>alert(1)</script>"
    table = pa.table(
        {"module": [evil, "a|b", "[x](http://e)", "*b* `c`"], "op": ["all_reduce"] * 4}
    )
    section = Section(
        "ops", f"by {evil}", table, [Column("module", f"module {evil}"), Column("op", "op")]
    )
    doc = Document(f"run {evil}", [("group", evil)], [section], warnings=[evil])
    md = MarkdownRenderer(with_plots=False).render(doc)
    assert "<script>" not in md and "</script>" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "| a\\|b | all_reduce |" in md
    assert "\\[x\\](http://e)" in md and "\\*b\\* \\`c\\`" in md
    assert md_text("line\nbreak") == "line break" and md_text("# x") == "\\# x"


@pytest.mark.parametrize("cmd", ["report", "query"])
def test_output_to_a_device_without_a_suffix_is_text(
    cmd: str, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dev = _char_device(tmp_path / "null")
    argv = [cmd, str(tiny)] + (["SELECT 1 AS x"] if cmd == "query" else [])
    assert main([*argv, "-o", str(dev)]) == 0
    assert stat.S_ISCHR(dev.lstat().st_mode)
    assert main([*argv, "-o", str(tmp_path / "r.pdf")]) == 2  # a file still needs a suffix
    assert "cannot tell the format" in _one_error_line(capsys.readouterr().err, cmd)


def test_report_to_dev_stdout_through_a_pipe(tiny: Path) -> None:
    argv = ["report", str(tiny), "--format", "md", "-o", "/dev/stdout"]
    done = subprocess.run(
        [sys.executable, "-m", "commlens", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# commlens report: gpt-tiny dp+tp, 4 ranks (gloo; tiny_run)")
    assert "](data:image/png;base64," in done.stdout  # no asset folder beside a pipe


# -- commlens's other writers ----------------------------------------------------


def test_profile_through_a_symlink_and_manifest_never_out_of_its_run(tmp_path: Path) -> None:
    from commlens.bench.fit import write_profile
    from commlens.trace.manifest import write_json_atomic

    real = tmp_path / "profiles" / "lab.toml"
    real.parent.mkdir()
    (tmp_path / "lab.toml").symlink_to(real)
    profile = {"name": "lab", "description": "d", "scope": "inter", "source": "s"}
    write_profile(tmp_path / "lab.toml", {**profile, "link": {"latency_s": 1e-5}, "ops": {}})
    assert (tmp_path / "lab.toml").is_symlink() and 'name = "lab"' in real.read_text()
    run = _refuses_a_link_out_of_the_run(
        tmp_path, lambda run: write_json_atomic(run / "run.json", {"format": "commlens-run"})
    )
    _no_temp(tmp_path, real.parent, run)
