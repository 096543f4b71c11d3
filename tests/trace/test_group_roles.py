"""One role per group for the whole run: the reader applies the ranks' final roles.

Events recorded before a group's role was known read with the group's final
role (``meta.group_roles``) in the SQL views, in ``read_rank`` and in a
loaded run; ranks that disagree are settled by majority, with a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
from torch import nn

import commlens
from commlens.cli.main import main
from commlens.trace.reader import open_run
from commlens.trace.synthetic import ev, write_parts, write_run
from tests.distributed import run_ranks


def _synthetic(tmp_path: Path, roles: dict[int, object], world: int = 2) -> Path:
    events = [
        e
        for r in range(world)
        for e in (
            ev(r, "all_reduce", 0, 10, pg="0", role=""),  # before the framework named it
            ev(r, "all_reduce", 20, 30, pg="0", role="dp"),
            ev(r, "all_gather", 40, 50, pg="7", role="tp"),
            ev(r, "send", 60, 70, pg="9", role="", peer=1 - r % 2),
        )
    ]
    meta = {r: {"group_roles": t} for r, t in roles.items()}
    return write_run(tmp_path / "run", events, world_size=world, rank_meta=meta)


def _by_group(rows: list[dict[str, object]]) -> dict[object, set[object]]:
    out: dict[object, set[object]] = {}
    for row in rows:
        out.setdefault(row["pg_name"], set()).add(row["role"])
    return out


def test_every_reader_gives_a_group_its_final_role(tmp_path: Path) -> None:
    run = _synthetic(tmp_path, {0: {"0": "dp", "7": "tp"}, 1: {"0": "dp"}})
    want = {"0": {"dp"}, "7": {"tp"}, "9": {""}}  # no final role: as recorded
    with open_run(run) as view:
        assert view.roles == {"0": "dp", "7": "tp"} and not view.warnings
        assert _by_group(view.sql("SELECT pg_name, role FROM events").to_pylist()) == want
        for dictionary in (True, False):
            t = view.read_rank(1, ["pg_name", "role"], dictionary=dictionary)
            assert pa.types.is_dictionary(t.column("role").type) == dictionary
            assert _by_group(t.to_pylist()) == want
        # the role alone, without its group's column asked for
        assert view.read_rank(0, ["seq", "role"]).column_names == ["seq", "role"]
        assert view.read_rank(0, ["role"]).column("role").to_pylist() == ["dp", "dp", "tp", ""]
        assert view.read_values(0, "role", [0, 3]) == ["dp", ""]
    loaded = commlens.load_run(run, quiet=True)
    assert _by_group(loaded.events.select(["pg_name", "role"]).to_pylist()) == want
    with open_run(loaded) as view:
        assert _by_group(view.sql("SELECT pg_name, role FROM events").to_pylist()) == want


def test_a_rank_without_a_table_reads_the_others_roles(tmp_path: Path) -> None:
    run = _synthetic(tmp_path, {0: {"0": "dp"}})
    file = run / "rank-00001.parquet"  # rank 1 killed: its events in parts, no final table
    write_parts(run / ".rank-00001.parts", pq.read_table(file))
    file.unlink()
    with open_run(run) as view:
        assert isinstance(view.sources[1], pa.Table)
        got = view.read_rank(1, ["pg_name", "role"]).to_pylist()
        assert {r["role"] for r in got if r["pg_name"] == "0"} == {"dp"}


def test_ranks_that_disagree_read_the_majority_role_with_a_warning(tmp_path: Path) -> None:
    run = _synthetic(tmp_path, {0: {"7": "tp"}, 1: {"7": "pp"}, 2: {"7": "pp"}}, world=3)
    with open_run(run) as view:
        assert view.roles == {"7": "pp"}
        assert view.warnings == [
            "ranks disagree on the role of group '7' (pp on ranks 1,2; tp on ranks 0): read as pp"
        ]
        rows = view.sql("SELECT DISTINCT role FROM events WHERE pg_name = '7'").to_pylist()
        assert rows == [{"role": "pp"}]


def test_a_tie_goes_to_the_lowest_rank_and_a_bad_table_is_ignored(tmp_path: Path) -> None:
    run = _synthetic(tmp_path, {0: {"7": "tp"}, 1: {"7": "pp"}, 2: ["not", "a", "table"]}, 3)
    with open_run(run) as view:
        assert view.roles == {"7": "tp"}
        assert view.warnings[0] == "rank 2's meta.group_roles is not a table of names: ignored"


def _ddp_named_late(rank: int, world: int, out: str) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    with commlens.capture(out):
        dist.init_process_group("gloo")
        dist.all_reduce(torch.ones(3))  # the default group before DDP names it dp
        torch.manual_seed(0)
        model = DDP(nn.Linear(8, 4))
        for _ in range(2):
            model(torch.randn(2, 8)).sum().backward()
        dist.destroy_process_group()


def test_a_ddp_group_named_after_its_first_ops_is_one_role_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_ranks(_ddp_named_late, 2, str(tmp_path))
    raw = pq.read_table(tmp_path / "rank-00000.parquet", columns=["pg_name", "op", "role"])
    recorded = {(r["op"], r["role"]) for r in raw.to_pylist()}
    assert ("all_reduce", "") in recorded and ("all_reduce", "dp") in recorded
    assert commlens.load_run(tmp_path, quiet=True).events.column("role").unique().to_pylist() == [
        "dp"
    ]
    sql = "SELECT pg_name, op, list(DISTINCT role) AS roles FROM events GROUP BY ALL"
    assert main(["query", str(tmp_path), sql, "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["columns"] == ["pg_name", "op", "roles"]
    assert {tuple(r["roles"]) for r in got["rows"]} == {("dp",)}
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    ops = json.loads(capsys.readouterr().out)["ops"]
    keys = [(o["op"], o["pg_name"]) for o in ops]
    assert len(keys) == len(set(keys)) and {o["role"] for o in ops} == {"dp"}


def test_names_with_quotes_are_only_names(tmp_path: Path) -> None:
    name, role = "x'); DROP TABLE t; --", "tp'"
    events = [ev(r, "all_reduce", 0, 10, pg=name) for r in range(2)]
    run = write_run(
        tmp_path / "run", events, world_size=2, rank_meta={0: {"group_roles": {name: role}}}
    )
    with open_run(run) as view:
        assert view.sql("SELECT DISTINCT pg_name, role FROM events").to_pylist() == [
            {"pg_name": name, "role": role}
        ]
