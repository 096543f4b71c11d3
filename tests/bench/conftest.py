"""Every netem test must leave no namespace, veth or bridge of its own behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netem.helpers import leftovers


@pytest.fixture(autouse=True)
def _no_emulated_leftovers() -> Iterator[None]:
    before = leftovers()
    yield
    left = leftovers() - before
    assert not left, f"the test left emulated runs behind: {sorted(left)}"
