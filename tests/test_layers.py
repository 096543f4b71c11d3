"""The two test layers: which modules tests/conftest.py puts in the e2e layer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import _guarded, _refuse, _spawns

HERE = Path(__file__).resolve().parent


def test_a_module_that_starts_ranks_is_e2e_and_a_pure_one_is_not() -> None:
    assert _spawns(HERE / "whatif" / "test_whatif_cli.py")
    assert not _spawns(HERE / "test_optable.py")
    assert not _spawns(HERE / "analysis" / "test_timeline.py")


def test_this_test_is_in_the_unit_layer(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("e2e") is None


def test_a_fixture_that_runs_a_command_is_e2e() -> None:
    # tests/importers/test_gloo_job.py: its module fixture runs main() on a list of
    # arguments that starts with commlens trace's: it starts ranks in set-up
    assert _spawns(HERE / "importers" / "test_gloo_job.py")


def test_the_unit_layer_refuses_a_process_in_set_up_too(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = getattr(os, "fork")  # noqa: B009  (the word as written would put this module in e2e)
    monkeypatch.setattr(request.config.option, "markexpr", "not e2e")
    guard = _guarded(request.node)  # around the test's body and its own fixtures' set-up
    next(guard)
    assert getattr(os, "fork") is _refuse  # noqa: B009
    guard.close()
    assert getattr(os, "fork") is real  # noqa: B009
