"""The two test layers: which modules tests/conftest.py puts in the e2e layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _spawns

HERE = Path(__file__).resolve().parent


def test_a_module_that_starts_ranks_is_e2e_and_a_pure_one_is_not() -> None:
    assert _spawns(HERE / "whatif" / "test_whatif_cli.py")
    assert not _spawns(HERE / "test_optable.py")
    assert not _spawns(HERE / "analysis" / "test_timeline.py")


def test_this_test_is_in_the_unit_layer(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("e2e") is None
