"""The README's tour stays true: each of its cheap commands runs here, and what its
block shows is checked against what the command prints now.

Every ``$ commlens ...`` line in a README code block is either run (:data:`CHECKS`)
or named in :data:`NOT_RUN` with the reason, so a new command is a decision. A
check is one of:

- ``exact``: every stretch of the block between ``...`` lines appears, line for
  line, in the output (deterministic commands: predict, net list, query);
- ``shape``: each line of the block's prose (headline bullets, progress lines,
  sentences: numbers and paths masked) appears in the output, however it wraps,
  and each table's title and column names are among one of the output's tables';
  with ``counts``, event counts are compared as numbers.

Runs that need processes come from the session's captured runs (tests/runs.py),
standing in for the README's ``runs/...`` directories.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from commlens.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TRACES = ROOT.parent / "shared" / "traces"
Runs = Mapping[str, Any]
"""The session's captured runs by name (``shared_runs`` of tests/runs.py)."""
WIDTH = "100"
"""The README's blocks are printed at 100 columns."""


@dataclass
class Shown:
    """A README command and the output its block shows under it."""

    command: str
    output: list[str]


def shown_commands(text: str) -> list[Shown]:
    """Every ``$ commlens`` command in the README's code blocks, with its output."""
    found: list[Shown] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
        current: Shown | None = None
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                command = line[2:]
                while not _complete(command) and i + 1 < len(lines):
                    i += 1
                    command += " " + lines[i].strip()
                current = Shown(command, []) if command.startswith("commlens ") else None
                if current is not None:
                    found.append(current)
            elif current is not None:
                current.output.append(line)
            i += 1
    return found


def _complete(command: str) -> bool:
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


_RULE = re.compile(r"^─+$")
_NUMBER = re.compile(r"[-+−]?\d[\d,.]*(?:–\d[\d,.]*)?")


_PATH = re.compile(r"(^|[(`'\"])(\.\.?/|/|runs/|tests/|examples/)")


def _token(word: str) -> str:
    """A word with its numbers masked, a path as ``<path>`` and a plural's s dropped
    (1 call, 2 calls)."""
    if _PATH.search(word):
        return "<path>"
    return re.sub(r"s\b", "", _NUMBER.sub("#", word))


def _words(line: str) -> str:
    return " ".join(t for t in (_token(w) for w in line.split()) if t)


def split_output(lines: list[str]) -> tuple[list[str], list[Counter[str]]]:
    """The prose lines (words masked by :func:`_token`) and the tables (the words of the
    title and column names above each rule) of an output, as printed or as the README
    shows it; a table's rows and note (up to a blank line) are neither."""
    prose: list[str] = []
    tables: list[Counter[str]] = []
    block: list[str] = []
    in_table = False
    for line in lines:
        if in_table:
            in_table = bool(line.strip())
            continue
        if _RULE.match(line.strip()):
            tables.append(Counter(t for row in block for t in _words(row).split()))
            block.clear()
            in_table = True
        elif not line.strip() or line.strip() == "...":
            prose += [w for w in map(_words, block) if w]
            block.clear()
        else:
            block.append(line)
    prose += [w for w in map(_words, block) if w]
    return prose, tables


@dataclass
class Check:
    """How one README command is checked: ``run`` gives what it prints now."""

    run: Callable[[Runs, pytest.CaptureFixture[str]], str]
    mode: str = "shape"
    counts: bool = False
    """Event counts (``N events``) must match as numbers (deterministic commands)."""
    skip: tuple[str, ...] = ()
    """Patterns of README lines not compared, each for a stated reason."""
    same: dict[str, str] = field(default_factory=dict)
    """README words that stand for the suite's (its run names)."""
    runs: bool = False
    """Whether it reads the session's captured runs (then it is an e2e test)."""


def trace_file(relative: str) -> Path:
    """A public trace sample of ../shared/traces (the test skips, saying so, without it)."""
    path = TRACES / relative
    if not path.exists():
        pytest.skip(f"{path} is not here (the public trace samples, ../shared/traces)")
    return path


def cli(*argv: str, code: int = 0, stream: str = "out") -> Callable[..., str]:
    """``main(argv)`` in this process; ``@name`` is the session's run ``name``, ``%path``
    a public trace sample. What it printed, the repository's path made relative."""

    def run(runs: Runs, capsys: pytest.CaptureFixture[str]) -> str:
        resolved = [
            str(runs[a[1:]].path) if a[0] == "@" else str(trace_file(a[1:])) if a[0] == "%" else a
            for a in argv
        ]
        assert main(resolved) == code
        out, err = capsys.readouterr()
        text = out if stream == "out" else err
        return text.replace(str(ROOT) + "/", "").replace(str(TRACES), "../shared/traces")

    return run


def imported(*sources: str) -> Callable[..., str]:
    """``commlens import`` of public trace samples into a scratch folder: its line."""

    def run(runs: Runs, capsys: pytest.CaptureFixture[str]) -> str:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "run"
            assert main(["import", *(str(trace_file(s)) for s in sources), "--out", str(out)]) == 0
            return capsys.readouterr().err.replace(str(out), "runs/imported")

    return run


def printed(name: str, stream: str = "stdout") -> Callable[..., str]:
    """What the command that made the session's run ``name`` printed."""
    return lambda runs, _capsys: getattr(runs[name], stream)


QUERY = (
    "select rank, step, phase, api, count(*) calls, sum(size_bytes) bytes "
    "from events group by all order by all limit 6"
)
COPY = "copy events to 'tests/data/tiny_run/rank-00000.parquet'"
TRACE_DDP = "commlens trace --out runs/ddp --"
"""The README's trace of examples/ddp_train.py (a key ending in `` --`` matches the
commands it begins)."""
RUN_TP = "commlens run --model gpt-tiny --scheme tp --nproc 4 --steps 4 --out runs/gpt-tp"
PREDICT = "commlens predict --model gpt-1.3b --scheme "
NETS = ("--net", "tcp-10g,ipoib-100g,rdma-100g", "--width", WIDTH)
DP8 = ("dp", "--dp", "8", "--gpus-per-node", "1")
MP = ("3d", "--tp", "4", "--pp", "2", "--dp", "1", "--gpus-per-node", "4")
FR = "flight_recorder/nvrx-megatron-16rank/gpu_error_1st"
DLRM = "kineto/param-dlrm-8rank/dlrm_"

CHECKS: dict[str, Check] = {
    TRACE_DDP: Check(printed("traced", "stderr"), counts=True, runs=True),
    "commlens report runs/ddp": Check(cli("report", "@traced", "--width", "1000"), runs=True),
    f'commlens query runs/ddp "{QUERY}"': Check(
        cli("query", "@traced", QUERY, "--width", WIDTH), mode="exact", runs=True
    ),
    f'commlens query tests/data/tiny_run "{COPY}"': Check(
        cli("query", "tests/data/tiny_run", COPY, code=2, stream="err"), mode="exact"
    ),
    'commlens query tests/data/tiny_run "select range from range(1000)" --max-rows 3': Check(
        cli("query", "tests/data/tiny_run", "select range from range(1000)", "--max-rows", "3"),
        mode="exact",
    ),
    # the suite's 2-rank pp run stands for the README's tp run; the first line echoes the
    # command's own arguments
    RUN_TP: Check(printed("pp"), skip=(r"^commlens run: ",), same={"gpt-tp": "gpt-pp"}, runs=True),
    "commlens compare runs/gpt-dp runs/gpt-tp": Check(
        cli("compare", "@dp", "@pp", "--width", "1000"),
        same={"gpt-tp": "gpt-pp", "gpt-tiny tp,": "gpt-tiny pp,"},
        runs=True,
    ),
    "commlens validate runs/gpt-tp": Check(  # its first line names the run's own job
        cli("validate", "@pp", "--width", "1000"), skip=(r"^validate: gpt-tiny ",), runs=True
    ),
    "commlens import nccl_data.json.gz --out runs/hta-a100": Check(
        imported("kineto/hta-nccl_parser_config/nccl_data.json.gz"), counts=True
    ),
    "commlens import dlrm_kineto.tar.gz dlrm_pytorch_et.tar.gz --out runs/dlrm": Check(
        imported(DLRM + "kineto.tar.gz", DLRM + "pytorch_et.tar.gz"), counts=True
    ),
    "commlens import gpu_error_1st --out runs/fr-megatron": Check(imported(FR), counts=True),
    PREDICT + " ".join(DP8 + NETS[:2]): Check(
        cli("predict", "--model", "gpt-1.3b", "--scheme", *DP8, *NETS), mode="exact"
    ),
    PREDICT + " ".join(MP + NETS[:2]): Check(
        cli("predict", "--model", "gpt-1.3b", "--scheme", *MP, *NETS), mode="exact"
    ),
    "commlens net list": Check(cli("net", "list", "--width", WIDTH), mode="exact"),
    f"commlens doctor ../shared/traces/{FR}": Check(
        cli("doctor", "%" + FR, "--width", "1000", code=1), mode="exact"
    ),
}
"""README command -> how it is checked."""


NOT_RUN = {
    r"^commlens trace --out runs/hf ": "a Hugging Face Trainer job (transformers; minutes)",
    r"^commlens report runs/hf$": "reads the Trainer job's run",
    r"^commlens import ds_stdout\.log": "a DeepSpeed log from a GPU job that is not in the samples",
    r"^commlens query runs/ds ": "reads the DeepSpeed log's run",
    r"^commlens import log_summary\.txt ": "the README shows no output for it",
    r"^commlens report runs/(hta-a100|dlrm|ds-summary|inspector|fr-megatron)$": "report of an "
    "import: the import's own line is checked",
    r"^commlens query runs/fr-megatron ": "reads the imported Flight Recorder run",
    r"^commlens whatif runs/dlrm ": "a replay of the imported 8-rank job (tens of seconds)",
    r"^commlens import nccl-inspector-4242 ": "the synthetic Inspector logs of "
    "tests/importers/test_inspector.py, made there",
    r"^commlens trace --out runs/ddp-(1gbit|200mbit) ": "two emulated nodes (root, network "
    "namespaces, a shaped link): the netem tests",
    r"^commlens whatif runs/ddp-1gbit": "reads the emulated 1 Gbit/s run",
    r"^commlens compare pred\.json ": "reads the emulated runs",
    r"^commlens run --model gpt-tiny --scheme dp --nproc 4 ": "the README shows no output for it",
    r"^commlens trace --out runs/hang ": "a job that hangs until the watchdog kills it",
    r"^commlens doctor runs/hang ": "reads the hung job's run",
    r"^commlens bench ": "timed collectives: the bench tests",
    r"^commlens net cleanup": "needs root and an emulated run's leftovers",
    r"^commlens sweep ": "a grid of runs (minutes)",
    r"^commlens report runs/demo/sweep": "reads the demo's sweep",
    r"^commlens demo ": "six emulated runs (minutes)",
}
"""README commands not run here, and why."""


def _readme() -> list[Shown]:
    return shown_commands(README.read_text(encoding="utf-8"))


def test_every_readme_command_is_run_or_said_why_not() -> None:
    commands = [s.command for s in _readme()]
    assert len(commands) > 20
    unknown = [
        c
        for c in commands
        if not any(_matches(c, k) for k in CHECKS) and not any(re.search(p, c) for p in NOT_RUN)
    ]
    assert not unknown, f"README commands neither checked nor listed in NOT_RUN: {unknown}"
    missing = [k for k in CHECKS if not any(_matches(c, k) for c in commands)]
    assert not missing, f"checked commands no longer in the README: {missing}"


def _matches(command: str, key: str) -> bool:
    return command == key or (key.endswith(" --") and command.startswith(key + " "))


def _shown(command: str) -> Shown:
    return next(s for s in _readme() if _matches(s.command, command))


def _exact(shown: Shown, actual: str) -> None:
    got = [line.rstrip() for line in actual.splitlines()]
    stretch: list[str] = []
    stretches = []
    for line in [*shown.output, "..."]:
        if line.strip() == "...":
            if stretch:
                stretches.append(stretch)
            stretch = []
        else:
            stretch.append(line.rstrip())
    for part in stretches:
        n = len(part)
        assert any(got[i : i + n] == part for i in range(len(got) - n + 1)), (
            "the README shows lines the command no longer prints:\n" + "\n".join(part)
        )


def _shape(shown: Shown, actual: str, check: Check) -> None:
    lines = [line for line in shown.output if not any(re.search(p, line) for p in check.skip)]
    for word, theirs in check.same.items():
        lines = [line.replace(word, theirs) for line in lines]
    prose, tables = split_output(lines)
    got_prose, got_tables = split_output(actual.splitlines())
    stream = " " + " ".join(got_prose) + " "  # wrapping is no difference
    for line in prose:
        assert f" {line} " in stream, f"the README shows {line!r}; the command prints:\n{actual}"
    for table in tables:
        assert any(not (table - t) for t in got_tables), (
            f"the README shows a table headed {sorted(table.elements())}; the command's "
            f"tables are headed {[sorted(t.elements()) for t in got_tables]}"
        )
    if check.counts:
        want = [m for line in lines for m in re.findall(r"(\d[\d,]*) events", line)]
        got = re.findall(r"(\d[\d,]*) events", actual)
        assert want and want == got[: len(want)], f"event counts: README {want}, now {got}"


def _check(command: str, runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    check = CHECKS[command]
    shown = _shown(command)
    actual = check.run(runs, capsys)
    if check.mode == "exact":
        _exact(shown, actual)
    else:
        _shape(shown, actual, check)


def _ids(commands: list[str]) -> list[str]:
    return [c.removeprefix("commlens ")[:50] for c in commands]


OF_RUNS = [c for c, check in CHECKS.items() if check.runs]
ALONE = [c for c, check in CHECKS.items() if not check.runs]


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands run from the repository's root at the README's width."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", WIDTH)


@pytest.mark.usefixtures("in_root")
@pytest.mark.parametrize("command", ALONE, ids=_ids(ALONE))
def test_readme_block_matches_the_command(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    _check(command, {}, capsys)  # reads no captured run


@pytest.mark.usefixtures("in_root")
@pytest.mark.parametrize("command", OF_RUNS, ids=_ids(OF_RUNS))
def test_readme_block_of_a_run_matches_the_command(
    command: str, shared_runs: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    _check(command, shared_runs, capsys)


def test_the_checker_fails_a_stale_block() -> None:
    """A block that says 20 events where the command says 28, names a column the table
    no longer has, or shows a headline sentence that changed, fails; numbers, plurals and
    wrapping do not count."""
    counted, plain = Check(printed("x"), counts=True), Check(printed("x"))
    now = "commlens trace: 2 ranks, 28 events -> /tmp/x/ddp (ok)\n"
    _shape(Shown("c", ["commlens trace: 2 ranks, 28 events -> runs/ddp (ok)"]), now, counted)
    with pytest.raises(AssertionError, match="event counts"):
        _shape(Shown("c", ["commlens trace: 2 ranks, 20 events -> runs/ddp (ok)"]), now, counted)
    table = "Steps\nstep   ranks   step (s)\n──────\n  0  2  0.1\n"
    _shape(Shown("c", ["Steps", "step ranks   step (s)", "─────", "  1  2  0.3"]), table, plain)
    with pytest.raises(AssertionError, match="table headed"):
        _shape(Shown("c", ["Steps", "step   ranks   time (s)", "─────"]), table, plain)
    prose = "* top op: all_reduce on group 0 (2 ranks, dp), 100.0% of the\n  service time\n"
    old = ["* top op: all_reduce on group 1 (1 rank, dp), 87.5% of the service", "  time"]
    _shape(Shown("c", old), prose, plain)
    with pytest.raises(AssertionError, match="the README shows"):
        _shape(
            Shown("c", ["* top op: all_reduce on group 0 (2 ranks, dp), 1% of it"]), prose, plain
        )
