"""The run generator's sizing and the group names it reports (commlens.trace.synthetic)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commlens.trace.synthetic import Spec, generate


def test_layers_sized_to_an_event_count() -> None:
    base = Spec(tp=8, pp=4, dp=32, steps=50, microbatches=8)
    spec = base.with_layers_for(20_000_000)
    assert spec.steps == 50 and spec.world_size == 1024
    assert abs(spec.events_per_step() * spec.steps - 20_000_000) < 0.05 * 20_000_000
    # one layer more or less is further from the target
    for other in (spec.layers - 1, spec.layers + 1):
        worse = Spec(tp=8, pp=4, dp=32, steps=50, microbatches=8, layers=other)
        assert abs(worse.events_per_step() * 50 - 2e7) > abs(spec.events_per_step() * 50 - 2e7)
    with pytest.raises(ValueError, match="tensor parallelism"):
        Spec(tp=1, pp=2, dp=2).with_layers_for(1000)


def test_counts_and_names_match_the_files(tmp_path: Path) -> None:
    spec = Spec(tp=2, pp=4, dp=2, ranks_per_node=4, steps=2, microbatches=3, layers=1)
    planted = generate(tmp_path / "run", spec)
    assert planted.events == spec.events_per_step() * spec.steps
    events = pq.read_table(tmp_path / "run" / "rank-00005.parquet", columns=["pg_name", "role"])
    named = {name: role for role, names in planted.names.items() for name in names}
    assert {role for role in planted.names} == {"tp", "dp", "pp"}
    for row in events.to_pylist():
        assert named[row["pg_name"]] == row["role"]
    for role, groups in planted.groups.items():
        assert len(planted.names[role]) == len(groups)
