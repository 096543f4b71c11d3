"""The one reader of a rank's in-flight file, shared by the hang watchdog and the doctor."""

from __future__ import annotations

import json
from pathlib import Path

import commlens.capture.inflight as capture_inflight
import commlens.doctor.from_run as from_run
import commlens.launch.watchdog as watchdog
from commlens.launch.watchdog import HangWatchdog
from commlens.trace import inflight
from commlens.trace.inflight import InFlight, read_inflight
from commlens.trace.layout import inflight_path

OP = {"op": "all_reduce", "pg_name": "0", "t_issue_ns": 5}


def _write(run: Path, rank: int, data: object) -> None:
    inflight_path(run, rank).write_text(json.dumps(data))


def test_a_good_file_and_each_kind_of_bad_one(tmp_path: Path) -> None:
    _write(tmp_path, 0, {"format": inflight.INFLIGHT_FORMAT, "events": 7, "ops": [OP, 3]})
    assert read_inflight(tmp_path, 0) == InFlight(7, [OP])  # a non-object op is left out
    _write(tmp_path, 1, {"events": "x", "ops": {"a": 1}})
    assert read_inflight(tmp_path, 1) == InFlight(0, [])
    _write(tmp_path, 2, {"events": True, "ops": []})  # a bool is no count
    assert read_inflight(tmp_path, 2) == InFlight(0, [])
    _write(tmp_path, 3, [1, 2])
    assert read_inflight(tmp_path, 3) is None
    inflight_path(tmp_path, 4).write_text("{not json")
    assert read_inflight(tmp_path, 4) is None
    assert read_inflight(tmp_path, 5) is None  # missing
    inflight_path(tmp_path, 6).symlink_to(inflight_path(tmp_path, 0))
    assert read_inflight(tmp_path, 6) is None  # never through a link


def test_the_watchdog_reads_a_malformed_count_as_no_progress_and_keeps_watching(
    tmp_path: Path,
) -> None:
    """Its own reader took int() of whatever the file held: a count that is not a number
    raised, and ended the watchdog's thread."""
    _write(tmp_path, 0, {"events": "many", "ops": [OP]})
    _write(tmp_path, 1, {"events": 3, "ops": []})
    dog = HangWatchdog(tmp_path, 10.0, lambda _run: None)
    assert dog.state() == (((0, 0), (1, 3)), True)


def test_one_signal_one_reader() -> None:
    assert capture_inflight.STACK_SIGNAL is inflight.STACK_SIGNAL is watchdog.STACK_SIGNAL
    assert capture_inflight.INFLIGHT_FORMAT is inflight.INFLIGHT_FORMAT
    for module in (watchdog, from_run):
        assert not hasattr(module, "_read") and not hasattr(module, "_read_inflight")
    assert from_run.MAX_SIDE_FILE is inflight.MAX_SIDE_FILE
