"""Flight Recorder dumps: the reader on the shared samples, and doctor's roots on the
four 16-rank Megatron hang scenarios (two faulty ranks each, injected by NVIDIA's
resiliency tests: its fault_injection.log names them)."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from commlens.cli.main import main
from commlens.doctor import diagnose
from commlens.doctor.from_fr import evidence_from_dumps
from commlens.errors import RunFormatError
from commlens.importers.flight_recorder import _entry, load_dump, read_dumps

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "flight_recorder"
MEGATRON = TRACES / "nvrx-megatron-16rank"
GLOO = TRACES / "generated-gloo-cpu"
pytestmark = pytest.mark.skipif(not MEGATRON.is_dir(), reason="../shared/traces is not here")

# The ranks each scenario injected its fault into (the sample's fault_injection.log).
INJECTED = {
    "gpu_error_1st": [12, 14],
    "gpu_error_2nd": [9, 14],
    "lock_gil_1st": [9, 14],
    "lock_gil_2nd": [10, 15],
}


@pytest.mark.parametrize("scenario", sorted(INJECTED))
def test_megatron_roots_are_the_injected_ranks(scenario: str) -> None:
    diag = diagnose(evidence_from_dumps(read_dumps(MEGATRON / scenario)))
    assert diag.kind == "hang"
    assert diag.root_ranks == INJECTED[scenario]
    # every other stalled rank is explained as a wait that leads to a root
    assert diag.victims and not set(diag.victims) & set(diag.root_ranks)
    for victim in diag.victims:
        assert any(line.startswith(f"rank {victim}: waits in") for line in diag.explanation)


def test_megatron_groups_and_states() -> None:
    dumps = read_dumps(MEGATRON / "gpu_error_1st")
    assert sorted(dumps.ranks) == list(range(16)) and dumps.world_size == 16
    roles = {g.desc for g in dumps.groups.values()}
    assert {"TENSOR_MODEL_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP",
            "EXPERT_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP_WITH_CP"} <= roles  # fmt: skip
    entry = dumps.ranks[0].entries[0]
    assert entry.state == "scheduled" and entry.t_end_ns is None
    # "nccl:send 0->3" on PP group 43 = [0, 4, 8, 12]: the group-local 3 is global 12
    assert (entry.op, entry.group, entry.peer) == ("send", "43", 12)
    assert entry.bytes_in == 4096 * 5120 * 2
    # pg_status is keyed by the rank's pg_id: named through the entries and creation order
    assert dumps.ranks[12].progress["74"].enqueued == 20536


def test_gloo_pickle_and_json_agree(tmp_path: Path) -> None:
    pickled = read_dumps(GLOO)  # rank_0 and rank_0.json side by side: the pickle is read
    only_json = tmp_path / "json"
    only_json.mkdir()
    for rank in (0, 1):
        shutil.copy(GLOO / f"rank_{rank}.json", only_json / f"rank_{rank}.json")
    from_json = read_dumps(only_json)
    for rank in (0, 1):
        a, b = pickled.ranks[rank].entries, from_json.ranks[rank].entries
        assert [(e.op, e.group, e.seq, e.bytes_in) for e in a] == [
            (e.op, e.group, e.seq, e.bytes_in) for e in b
        ]
    assert len(pickled.ranks[0].entries) == 18
    assert diagnose(evidence_from_dumps(pickled)).kind == "healthy"


class _Evil:
    def __reduce__(self) -> tuple[object, ...]:
        return (print, ("unpickled!",))


def test_restricted_unpickler_refuses_classes(tmp_path: Path) -> None:
    path = tmp_path / "rank_0"
    path.write_bytes(pickle.dumps({"version": "2.9", "pg_config": {}, "entries": [_Evil()]}))
    with pytest.raises(RunFormatError, match=r"not a Flight Recorder dump.*builtins\.print"):
        load_dump(path)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"rank_0": b"hello"}, "neither pickle nor JSON"),
        ({"rank_0": b"{}"}, "no version or pg_config"),
        ({"notes.txt": b"x"}, "no Flight Recorder dump"),
    ],
)
def test_bad_dumps_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], files: dict[str, bytes], message: str
) -> None:
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert main(["doctor", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_dumps_of_two_jobs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(MEGATRON / "gpu_error_1st" / "_dump_0", tmp_path / "_dump_0")
    shutil.copy(MEGATRON / "gpu_error_2nd" / "_dump_1", tmp_path / "_dump_1")
    assert main(["doctor", str(tmp_path)]) == 2
    assert "dumps of two jobs" in capsys.readouterr().err


def test_cli_json_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(MEGATRON / "lock_gil_2nd"), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "hang" and data["root_ranks"] == [10, 15]
    assert main(["doctor", str(GLOO), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "healthy"


def test_import_fr_megatron(tmp_path: Path) -> None:
    """commlens import --format fr: 16 ranks, Megatron roles, ops matched by sequence id,
    each rank's entry states kept."""
    from commlens.trace.reader import load_run

    out = tmp_path / "run"
    assert (
        main(["import", str(MEGATRON / "gpu_error_1st"), "--format", "fr", "--out", str(out)]) == 0
    )
    run = load_run(out, quiet=True)
    assert run.world_size == 16 and sorted(run.ranks) == list(range(16))
    events = run.events.to_pylist()
    roles = {e["pg_name"]: e["role"] for e in events}
    assert roles["43"] == "pp" and roles["41"] == "tp" and roles["74"] == "ep"
    meta = json.loads((out / "rank-00012.json").read_text())["meta"]
    assert meta["fr_states"] == {"scheduled": 27}
    # the all_to_all #20530 of EP group 74: issued by all four members, one size each
    a2a = [e for e in events if e["pg_name"] == "74" and e["op"] == "all_to_all"]
    assert {e["rank"] for e in a2a} == {12, 13, 14, 15}


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_page_formats(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(MEGATRON / "lock_gil_1st"), "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert "hang: ranks 9,14 at the root" in out and "PIPELINE_MODEL_PARALLEL_GROUP" in out


def test_an_entry_reads_op_and_dtype_names_by_the_importers_tables() -> None:
    # The names commops and importers.model know, as other importers read them.
    raw = {
        "profiling_name": "nccl:all_gather_into_tensor",
        "process_group": ["0", "default_pg"],
        "input_sizes": [[4]],
        "input_dtypes": ["Float8_e4m3fn"],
        "output_sizes": [[8]],
        "output_dtypes": ["Float8_e4m3fn"],
    }
    entry = _entry(0, raw, {})
    assert (entry.op, entry.dtype) == ("all_gather", "float8_e4m3fn")
    assert (entry.bytes_in, entry.bytes_out) == (4, 8)
    raw.update(profiling_name="gloo:barrier", input_dtypes=["BFloat16"], output_dtypes=[])
    entry = _entry(0, raw, {})
    assert (entry.op, entry.dtype, entry.bytes_in) == ("barrier", "bfloat16", 8)
