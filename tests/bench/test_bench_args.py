"""``commlens bench`` refuses bad arguments in one line before any rank starts."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from commlens.bench import runner
from commlens.bench.runner import BenchConfig, check_bench_fits, rank_bytes
from commlens.cli.main import main
from commlens.errors import UsageError
from commlens.job.memory import PROCESS_BASELINE_BYTES


@pytest.fixture
def no_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a benchmark starts."""

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(runner, "run_bench", refuse)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["bench", *argv])
    captured = capsys.readouterr()
    assert code != 0 and captured.out == ""
    assert captured.err.startswith("commlens bench: error: ") and captured.err.count("\n") == 1
    return captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fit", "{tmp}/p.txt"], "must end in .toml"),
        (["--fit", "{tmp}/missing/p.toml"], "does not exist"),
        (["--fit", "{tmp}/dir.toml"], "is a directory"),
        (["--fit", "{tmp}/p.toml", "--nproc", "1"], "--fit needs at least 2 ranks"),
        (["--fit", "{tmp}/p.toml", "--sizes", "1K"], "at least two sizes that 2 ranks can split"),
        (
            ["--fit", "{tmp}/p.toml", "--sizes", "1K,2K", "--fit-min-size", "4K"],
            "at least two sizes of at least 4K",
        ),
        (["--fit", "{tmp}/p.toml", "--fit-min-size", "lots"], "bad size 'lots'"),
        (["--fit", "{tmp}/p.toml", "--fit-name", ""], "non-empty name"),
        (["--fit", "{tmp}/p.toml", "--fit-name", "a\nb"], "printable line"),
        (["--fit-name", "lab"], "need --fit FILE.toml"),
        (["--fit-min-r2", "0.8"], "need --fit FILE.toml"),
        (["--fit", "{tmp}/p.toml", "-o", "{tmp}/p.toml"], "name the same file"),
        (["--nproc", "2000"], "--nproc 2,000 is more ranks than one host runs"),
        (["--nproc", "0"], "--nproc must be at least 1"),
        (["--iters", "1000000"], "at most 10,000 calls"),
        (["--warmup", "1000000"], "at most 10,000 calls"),
        (["--sizes", "1,100G"], "above the largest message, 64G"),
        (["--sizes", "32G"], "GB of host memory"),
        (["--nodes", "2", "--link", "fast"], "bad link rate 'fast'"),
        (["--ops", "all_reduce,broadcast,all_reduce"], "--ops names all_reduce more than once"),
    ],
)
def test_refused_before_the_benchmark(
    argv: list[str],
    message: str,
    tmp_path: Path,
    no_ranks: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "dir.toml").mkdir()
    err = _refused([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert message in err
    assert not (tmp_path / "p.toml").exists()


def test_unwritable_fit_folder_is_refused_first(
    tmp_path: Path,
    no_ranks: None,
    readonly_dir: Callable[[Path], Path],
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    locked = tmp_path / "locked"
    if os.geteuid() == 0:  # root writes into any folder, but not onto a read-only mount
        readonly_dir(locked)
    else:
        locked.mkdir()
        locked.chmod(0o500)
        request.addfinalizer(lambda: locked.chmod(0o700))
    assert "is not writable" in _refused(["--fit", str(locked / "p.toml")], capsys)


def test_memory_counts_the_process_baseline_per_rank() -> None:
    cfg = BenchConfig(ops=["all_reduce"], sizes=[1 << 20], nproc=8, backend="gloo")
    per_rank = rank_bytes(cfg)
    assert 4 << 20 <= per_rank <= 16 << 20  # buffers and check temporaries of 1 MiB
    need = 8 * (PROCESS_BASELINE_BYTES + per_rank)
    check_bench_fits(cfg, available=need)
    with pytest.raises(UsageError, match=r"8 ranks need about 1\.\d GB of host memory"):
        check_bench_fits(cfg, available=need - 1)


def test_unloadable_fit_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Times that fall as sizes grow: no op resolves a rate per byte, so there is no profile.
    def fake_bench(cfg: BenchConfig, on_row: Any = None) -> runner.BenchReport:
        rows = [
            {"op": "all_reduce", "size_bytes": s, "count": s // 4, "dtype": "float32",
             "ranks": 2, "nodes": 1, "iters": 2, "ok": True, "time_min_s": t,
             "time_mean_s": t, "time_max_s": t, "time_p50_s": t, "time_p99_s": t,
             "algbw_GB/s": s / t / 1e9, "busbw_GB/s": s / t / 1e9, "busbw_Gbit/s": 8 * s / t / 1e9}
            for s, t in ((1024, 3e-3), (4096, 2e-3), (16384, 1e-3))
        ]  # fmt: skip
        return runner.BenchReport(cfg, rows)

    monkeypatch.setattr(runner, "run_bench", fake_bench)
    target = tmp_path / "p.toml"
    code = main(["bench", "--sizes", "1K,4K,16K", "--fit", str(target), "-o", os.devnull])
    *progress, err = capsys.readouterr().err.strip().splitlines()  # stderr is no terminal
    assert all(line.startswith("bench: ") for line in progress)
    assert code != 0 and err.startswith("commlens bench: error: ")
    assert "no op's time grew with its size from 1K to 16K" in err
    assert "nothing written" in err
    assert not target.exists()


def test_with_nccl_the_buffers_are_checked_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import commlens.workloads.fit as fit

    monkeypatch.setattr(BenchConfig, "resolved_backend", lambda self: "nccl")
    monkeypatch.setattr(fit, "device_memory_available", lambda: 64 << 30)
    cfg = BenchConfig(ops=["all_reduce"], sizes=[1 << 30], nproc=2, backend="nccl")
    check_bench_fits(cfg, available=3 * PROCESS_BASELINE_BYTES)  # the host: processes only
    with pytest.raises(UsageError, match="GB of host memory"):
        check_bench_fits(cfg, available=PROCESS_BASELINE_BYTES)
    monkeypatch.setattr(fit, "device_memory_available", lambda: 1 << 30)
    with pytest.raises(UsageError, match=r"buffers of 1G need about \d+\.\d GB per GPU"):
        check_bench_fits(cfg, available=1 << 40)


def _fake_report(cfg: BenchConfig, on_row: Any = None) -> runner.BenchReport:
    """A measured all_reduce at 1K and 64K and a skipped all_gather (no ranks start)."""
    rows: list[dict[str, Any]] = [
        {"op": "all_reduce", "size_bytes": s, "count": s // 4, "dtype": "float32",
         "ranks": 2, "nodes": 1, "iters": 2, "ok": True, "time_min_s": t,
         "time_mean_s": t, "time_max_s": t, "time_p50_s": t, "time_p99_s": t,
         "algbw_GB/s": s / t / 1e9, "busbw_GB/s": s / t / 1e9, "busbw_Gbit/s": 8 * s / t / 1e9}
        for s, t in ((1024, 1e-4), (65536, 2e-3))
    ]  # fmt: skip
    rows.append({"op": "all_gather", "size_bytes": 0, "skipped": "too small for 2 ranks"})
    return runner.BenchReport(cfg, rows)


@pytest.mark.parametrize("fmt", ["text", "md", "html", "json", "csv"])
def test_every_format_renders(
    fmt: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import csv
    import io
    import json

    monkeypatch.setattr(runner, "run_bench", _fake_report)
    assert (
        main(["bench", "--ops", "all_reduce,all_gather", "--sizes", "1K,64K", "--format", fmt]) == 0
    )
    out = capsys.readouterr().out
    if fmt == "json":  # the report's dict, skipped rows saying why
        data = json.loads(out)
        assert data["config"]["ops"] == ["all_reduce", "all_gather"]
        assert [r.get("skipped") for r in data["results"]] == [None, None, "too small for 2 ranks"]
    elif fmt == "csv":  # the measured rows, floats to 6 significant digits
        rows = list(csv.DictReader(io.StringIO(out)))
        assert [(r["op"], r["size_bytes"], r["ok"]) for r in rows] == [
            ("all_reduce", "1024", "True"),
            ("all_reduce", "65536", "True"),
        ]
        assert rows[0]["time_mean_s"] == "0.0001" and rows[1]["algbw_GB/s"] == "0.032768"
    else:
        assert "commlens bench: 2 ranks on 1 node, float32, 20 iters" in out
        assert "busbw (GB/s)" in out and "64K" in out and "skipped: too small for 2 ranks" in out
        assert "2,000.0" in out  # the mean latency of 64K, in µs
    if fmt == "text":
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("all_gather"))
        assert not lines[at - 1].strip()  # a rule between ops
    if fmt == "html":
        assert out.startswith("<!DOCTYPE html>") and out.count("<table>") == 1


def test_fit_lines_and_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "run_bench", _fake_report)
    target = tmp_path / "p.toml"
    assert main(["bench", "--sizes", "1K,64K", "--fit", str(target), "-o", os.devnull]) == 0
    err = capsys.readouterr().err
    assert "fit all_reduce: t = 69.8 µs + S / 0.034 GB/s (r2 1.0000, max error 0.0%)" in err
    assert "wrote network profile" in err and target.exists()


def _scattered_report(scatter: list[float]) -> Callable[..., runner.BenchReport]:
    """A bench whose all_reduce grows 1 µs per KB but each size's time is scaled by its
    own factor (a busy host's scatter)."""

    def fake_bench(cfg: BenchConfig, on_row: Any = None) -> runner.BenchReport:
        rows = []
        for k, s in zip(scatter, cfg.sizes, strict=True):
            t = (1e-3 + s * 1e-9) * k
            rows.append(
                {"op": "all_reduce", "size_bytes": s, "count": s // 4, "dtype": "float32",
                 "ranks": 2, "nodes": 1, "iters": 2, "ok": True, "time_min_s": t,
                 "time_mean_s": t, "time_max_s": t, "time_p50_s": t, "time_p99_s": t,
                 "algbw_GB/s": s / t / 1e9, "busbw_GB/s": s / t / 1e9,
                 "busbw_Gbit/s": 8 * s / t / 1e9}
            )  # fmt: skip
        return runner.BenchReport(cfg, rows)

    return fake_bench


SIZES_6 = "64K:2M:2"  # 64K .. 2M: six sizes


def test_a_poor_fit_is_refused_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "run_bench", _scattered_report([3.0, 0.4, 2.5, 0.5, 3.0, 0.9]))
    target = tmp_path / "p.toml"
    code = main(["bench", "--sizes", SIZES_6, "--fit", str(target), "-o", os.devnull])
    *progress, err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("bench: ") for line in progress)
    assert code != 0 and err.startswith("commlens bench: error: poor fit: all_reduce r2 ")
    assert "is below 0.5" in err and "nothing written" in err
    assert not target.exists() and list(tmp_path.iterdir()) == []
    # accepted when asked, with the warning that it is poor
    assert main(["bench", "--sizes", SIZES_6, "--fit", str(target), "--fit-min-r2", "-5"]) == 0
    err = capsys.readouterr().err
    assert "warning: poor fit: all_reduce r2 " in err and target.exists()


def test_a_good_fit_is_written_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "run_bench", _scattered_report([1.02, 0.98, 1.01, 0.99, 1.0, 1.0]))
    target = tmp_path / "p.toml"
    assert main(["bench", "--sizes", SIZES_6, "--fit", str(target), "-o", os.devnull]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "fit all_reduce: " in err and target.exists()
    assert "r2 0.99" in err or "r2 1.0000" in err


@pytest.mark.parametrize("value", ["nan", "1.5", "lots"])
def test_fit_min_r2_must_be_a_number_at_most_1(
    value: str, tmp_path: Path, no_ranks: None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--fit", str(tmp_path / "p.toml"), "--fit-min-r2", value])
    assert exc.value.code == 2 and "--fit-min-r2" in capsys.readouterr().err
