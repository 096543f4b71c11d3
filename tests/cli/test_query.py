"""commlens query: reads the run's views and nothing else; results stream; Ctrl-C stops it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from commlens.analysis import open_run
from commlens.analysis.query import open_query
from commlens.cli.main import main
from commlens.trace.synthetic import write_parts

DATA = Path(__file__).parent.parent / "data"
SRC = str(Path(__file__).resolve().parents[2] / "src")

# Run from a child interpreter: says "ready" once imports are done and main() is next.
CHILD = (
    "import faulthandler, signal, sys\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    # Ctrl-C as in a terminal: a test run started in the background of a script
    # inherits SIGINT ignored, which commlens (rightly) keeps.
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from commlens.cli.main import main\n"
    "import commlens.analysis.query, commlens.report.stream\n"
    "print('ready', file=sys.stderr, flush=True)\n"
    "rc = main(sys.argv[1:])\n"
    "if rc == 0:\n"  # peak RSS of this program (ru_maxrss would count the forked parent's)
    "    hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]\n"
    "    print(hwm.strip(), file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copytree(DATA / "tiny_run", tmp_path / "run"))


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``root``: size, mtime and a hash of its bytes."""
    return {
        str(p.relative_to(root)): (
            p.stat().st_size,
            p.stat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _child(args: list[str], stdout: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, "query", *args],
        env=env,
        text=True,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


REFUSED = [
    "COPY (SELECT 1 AS a) TO 'run/rank-00000.parquet' (FORMAT parquet)",
    "COPY (SELECT 1 AS a) TO 'run/rank-00000.parquet' (FORMAT csv, USE_TMP_FILE false)",
    "COPY events TO 'out.csv'",
    "COPY (SELECT 1 AS a) TO 'run/new.parquet'",
    "EXPORT DATABASE 'exported'",
    "ATTACH 'scratch.db' AS scratch",
    "ATTACH 'run/rank-00001.parquet' AS r1",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SELECT * FROM 'https://example.com/x.csv'",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('run/run.json')",
    "SELECT count(*) FROM read_parquet('run/rank-00000.parquet')",
    "SELECT * FROM glob('/etc/*')",
    "SET threads = 1",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "PRAGMA enable_profiling",
    "SET lock_configuration = false; COPY events TO 'out.csv'",
]


@pytest.mark.parametrize("sql", REFUSED)
def test_anything_but_reading_the_run_is_one_line_error(
    tiny: Path, sql: str, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tiny.parent
    before = _snapshot(work)
    assert main(["query", str(tiny), sql]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("commlens query: error: query failed: "), err
    assert err.count("\n") == 1
    assert _snapshot(work) == before  # the run untouched, nothing new beside it
    assert main(["query", str(tiny), "SELECT count(*) AS n FROM events", "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ['"n"', "52"]


def test_refusals_say_what_a_query_may_do(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["query", str(tiny), "SELECT * FROM read_csv('/etc/passwd')"]) == 2
    err = capsys.readouterr().err
    assert '"/etc/passwd"' in err
    assert "a query reads only the run's views events, steps and ranks" in err


def test_views_read_as_an_open_run_reads_them(tiny: Path) -> None:
    table = pq.read_table(tiny / "rank-00003.parquet")
    (tiny / "rank-00003.parquet").unlink()
    write_parts(tiny / ".rank-00003.parts", table)  # one rank read from its flushed parts
    plain = open_run(tiny)
    with open_query(tiny) as session:
        for sql in (
            "SELECT * FROM events ORDER BY rank, seq",
            "SELECT * FROM steps ORDER BY rank, step",
            "SELECT * FROM ranks ORDER BY rank",
        ):
            with session.execute(sql) as result:
                rows = [row for batch in result for row in batch.to_pylist()]
            assert rows == plain.sql(sql).to_pylist() and rows, sql
        with session.execute("SELECT current_setting('temp_directory') AS d") as result:
            spill = Path(next(iter(result)).to_pylist()[0]["d"])
        assert spill == session.temp_dir and spill.is_dir()  # private, not the cwd's .tmp
    assert not spill.exists()
    plain.close()


def test_text_shows_the_first_rows_and_counts_the_rest(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["query", str(tiny), "SELECT range AS i FROM range(250)"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.strip() for line in lines[2:4]] == ["0", "1"]
    assert lines[101].strip() == "99"
    assert lines[102].strip() == "... 150 more rows (250 in all; --max-rows N or --format csv/json)"
    assert len(lines) == 103
    assert main(["query", str(tiny), "SELECT range AS i FROM range(250)", "--max-rows", "3"]) == 0
    assert capsys.readouterr().out.split()[2:6] == ["0", "1", "2", "..."]
    assert main(["query", str(tiny), "SELECT 1 AS i", "--max-rows", "0"]) == 2
    assert "--max-rows must be at least 1" in capsys.readouterr().err
    assert main(["query", str(tiny), "  "]) == 2
    assert capsys.readouterr().err == "commlens query: error: the query is empty\n"


def test_csv_and_json_carry_every_row(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT range AS i, CASE WHEN range = 7 THEN 'nan'::DOUBLE END AS x FROM range(200000)"
    assert main(["query", str(tiny), sql, "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ['"i","x"', "0,"] and lines[8] == "7,nan"
    assert len(lines) == 200_001 and lines[-1] == "199999,"
    assert main(["query", str(tiny), sql, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["columns"] == ["i", "x"]
    assert len(data["rows"]) == 200_000
    assert data["rows"][7] == {"i": 7, "x": None} and data["rows"][-1]["i"] == 199_999
    assert main(["query", str(tiny), "SELECT pg_ranks FROM events LIMIT 1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"pg_ranks"', '"0-1"']
    assert main(["query", str(tiny), "SELECT 1 AS a WHERE false", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"columns": ["a"], "rows": []}
    failing = "SELECT CASE WHEN range < 150000 THEN range ELSE error('boom') END FROM range(200000)"
    assert main(["query", str(tiny), failing, "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert err == "commlens query: error: query failed: Invalid Input Error: boom\n"


def test_json_sums_are_numbers(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # DuckDB's sum() of integers is a HUGEINT (an Arrow decimal of scale 0): an int in JSON
    sql = (
        "SELECT op, sum(size_bytes) AS bytes, sum(duration_s) AS s, sum(0.25) AS q, "
        "sum(CASE WHEN false THEN 1 END) AS none FROM events GROUP BY op ORDER BY op"
    )
    assert main(["query", str(tiny), sql, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(type(r["bytes"]) is int and r["bytes"] > 0 for r in rows)
    assert all(type(r["s"]) is float and type(r["q"]) is float for r in rows)
    assert all(r["none"] is None for r in rows)
    with open_run(tiny) as view:
        total = view.row("SELECT sum(size_bytes)::BIGINT FROM events")
    assert total is not None and sum(r["bytes"] for r in rows) == total[0]


def test_a_big_result_streams_in_bounded_memory(tiny: Path) -> None:
    # 20 million rows: streamed, the program peaks near 160 MB; holding them as one
    # Arrow table takes it to 290 MB, as Python rows to several GB.
    proc = _child(
        [str(tiny), "SELECT * FROM range(20000000)", "--format", "csv"], subprocess.DEVNULL
    )
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    peak_mb = int(err.split("VmHWM:")[1].split()[0]) / 1024
    assert peak_mb < 250, f"peak RSS {peak_mb:.0f} MB"


def test_ctrl_c_stops_a_running_query(tiny: Path) -> None:
    # A cross join of 4e10 rows (minutes of work), or rows streaming into a pipe
    # that is no longer read: either way Ctrl-C ends it at once.
    cross_join = ["SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b"]
    streaming = ["SELECT * FROM range(1000000000)", "--format", "csv"]
    # Ctrl-C at any moment: while the run opens, as the statement starts, or later.
    delays = (0.5, 0.5, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
    for i, delay in enumerate(delays):
        proc = _child([str(tiny), *(streaming if i % 2 else cross_join)], subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stderr.readline() == "ready\n"
        if i % 2:
            assert proc.stdout.readline() == '"range"\n'  # and then the pipe fills
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the child's stacks, for the failure message
            time.sleep(1)
            proc.kill()
            pytest.fail(f"Ctrl-C after {delay} s did not end the query:\n{proc.stderr.read()}")
        err = proc.stderr.read()
        assert code == 130, f"Ctrl-C after {delay} s: exit {code}\n{err}"
        assert time.monotonic() - sent < 20  # uninterrupted, either would run for minutes
        # (a Ctrl-C while the command line is still parsed has no command to name)
        assert err in ("commlens query: interrupted\n", "commlens: interrupted\n")
        proc.stdout.close()
        proc.stderr.close()


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal (a suite started in the
    background inherits it ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _Interrupting:
    """A class attribute whose ``__set_name__`` gets Ctrl-C, as a dataclass field can
    while its module imports."""

    def __set_name__(self, owner: type, name: str) -> None:
        signal.raise_signal(signal.SIGINT)


def test_ctrl_c_while_a_module_imports_is_an_interruption(
    tiny: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    ctrl_c_raises: None,
) -> None:
    # Python reports the KeyboardInterrupt of a __set_name__ as a RuntimeError
    # (3.11), which once came out as a traceback and exit code 1.
    def build_parser() -> object:
        type("Imported", (), {"field": _Interrupting()})
        raise AssertionError("Ctrl-C did not stop the import")

    monkeypatch.setattr("commlens.cli.main.build_parser", build_parser)
    assert main(["query", str(tiny), "SELECT 1"]) == 130
    assert capsys.readouterr().err == "commlens: interrupted\n"


def test_ctrl_c_as_the_worker_starts_stops_it_before_the_connection_closes(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Interrupted inside Thread.start, the statement's worker runs but its result was
    # never returned: the session must still stop it, not close the connection
    # under it (the interpreter then aborts at exit, "FATAL: exception not rethrown").
    start = threading.Thread.start
    started: list[threading.Thread] = []

    def interrupted_start(thread: threading.Thread) -> None:
        start(thread)
        started.append(thread)
        raise KeyboardInterrupt

    cross_join = "SELECT sum(a.range * b.range) FROM range(200000) a, range(200000) b"
    session = open_query(tiny)
    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(KeyboardInterrupt), session:
        session.execute(cross_join)
    monkeypatch.undo()
    assert len(started) == 1 and not started[0].is_alive() and not session.running
    with pytest.raises(duckdb.ConnectionException):
        session.con.sql("SELECT 1")


def test_a_closed_pipe_ends_the_query_quietly(tiny: Path) -> None:
    proc = _child(
        [str(tiny), "SELECT * FROM range(1000000000)", "--format", "csv"], subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stderr.readline() == "ready\n"
    assert [proc.stdout.readline(), proc.stdout.readline()] == ['"range"\n', "0\n"]
    proc.stdout.close()  # as `| head -2` does
    assert proc.wait(timeout=30) == 0
    assert proc.stderr.read().startswith("VmHWM:")


def test_an_output_file_is_written_whole_or_not_at_all(
    tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "SELECT range AS i FROM range(200000)"
    assert main(["query", str(tiny), sql, "-o", "out.csv"]) == 0
    assert capsys.readouterr().out == ""
    lines = Path("out.csv").read_text().splitlines()
    assert len(lines) == 200_001 and lines[-1] == "199999"
    assert main(["query", str(tiny), sql, "-o", "out.json"]) == 0  # the suffix picks the format
    assert len(json.loads(Path("out.json").read_text())["rows"]) == 200_000
    assert main(["query", str(tiny), sql, "-o", "/dev/null", "--format", "csv"]) == 0
    before = _snapshot(tiny.parent)
    failing = "SELECT CASE WHEN range < 150000 THEN range ELSE error('boom') END FROM range(200000)"
    assert main(["query", str(tiny), failing, "-o", "out.csv"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("commlens query: error: query failed: ") and "boom" in err
    assert err.count("\n") == 1
    assert _snapshot(tiny.parent) == before  # out.csv as it was, no temporary file left
    assert main(["query", str(tiny), sql, "-o", "out.html"]) == 2
    assert "query output is text, csv or json, not html" in capsys.readouterr().err
