"""The execution trace joined to the profiler trace: by record-function id where the
profiler trace carries them, else by order, and the run says which (the real DLRM
files carry none: their External ids are not the ET's rf_ids)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from commlens.cli.main import main
from commlens.trace.manifest import MANIFEST
from commlens.trace.reader import load_run
from tests.importers.shared import trace

DLRM = "kineto/param-dlrm-8rank/dlrm_kineto.tar.gz"
DLRM_ET = "kineto/param-dlrm-8rank/dlrm_pytorch_et.tar.gz"


def _member(archive: Path, suffix: str) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        for m in tar:
            if m.isfile() and Path(m.name).name.startswith(suffix):
                return json.load(tar.extractfile(m))  # type: ignore[arg-type]
    raise AssertionError(suffix)


def _estimated(run: Path) -> list[str]:
    return json.loads((run / MANIFEST).read_text())["import"]["estimated"]


def test_dlrm_is_joined_by_order_and_says_so(tmp_path: Path) -> None:
    kineto = _member(trace(DLRM), "worker0_")
    rpc = [e for e in kineto["traceEvents"] if e.get("name") == "record_param_comms"]
    assert rpc and not any("Record function id" in e["args"] for e in rpc)
    out = tmp_path / "run"
    assert main(["import", str(trace(DLRM)), str(trace(DLRM_ET)), "--out", str(out)]) == 0
    assert any("joined by order" in line for line in _estimated(out))


def test_record_function_ids_decide_the_join(tmp_path: Path) -> None:
    """Rank 0's real trace given the ET's rf_ids, the first and last all-reduces, of different
    sizes swapped: the sizes follow the ids, not the order."""
    kineto = _member(trace(DLRM), "worker0_")
    et = _member(trace(DLRM_ET), "dlrm_eg_0")
    nodes = sorted(
        (n for n in et["nodes"] if n["name"] == "record_param_comms"), key=lambda n: n["id"]
    )
    rpc = sorted(
        (e for e in kineto["traceEvents"] if e.get("name") == "record_param_comms"),
        key=lambda e: e["ts"],
    )
    assert len(rpc) == len(nodes) == 13
    ids = [n["rf_id"] for n in nodes]
    names = [n["inputs"][3] if n["inputs"][3] == "wait" else n["inputs"][4] for n in nodes]
    reduces = [i for i, name in enumerate(names) if name == "allreduce"]
    first, second = reduces[0], reduces[-1]
    ids[first], ids[second] = ids[second], ids[first]
    for e, rf in zip(rpc, ids, strict=True):
        e["args"]["Record function id"] = rf
    (tmp_path / "k").mkdir()
    (tmp_path / "e").mkdir()
    (tmp_path / "k" / "worker0.pt.trace.json").write_text(json.dumps(kineto))
    (tmp_path / "e" / "dlrm_eg_0.json").write_text(json.dumps(et))
    out = tmp_path / "run"
    src = [str(tmp_path / "k" / "worker0.pt.trace.json"), str(tmp_path / "e" / "dlrm_eg_0.json")]
    assert main(["import", *src, "--out", str(out)]) == 0
    assert any("joined by record-function id" in line for line in _estimated(out))
    by_id = load_run(out, quiet=True).events.sort_by("t_issue_ns").column("bytes_in").to_pylist()
    plain = tmp_path / "plain"
    (tmp_path / "k2").mkdir()
    for e in rpc:
        del e["args"]["Record function id"]
    (tmp_path / "k2" / "worker0.pt.trace.json").write_text(json.dumps(kineto))
    src[0] = str(tmp_path / "k2" / "worker0.pt.trace.json")
    assert main(["import", *src, "--out", str(plain)]) == 0
    by_order = load_run(plain, quiet=True).events.sort_by("t_issue_ns")
    by_order_bytes = by_order.column("bytes_in").to_pylist()
    # the ops sit in time order; the two all-reduces' sizes are swapped between joins
    kept = [i for i, name in enumerate(names) if name != "wait"]
    i, j = kept.index(first), kept.index(second)
    assert by_order_bytes[i] != by_order_bytes[j]
    want = list(by_order_bytes)
    want[i], want[j] = want[j], want[i]
    assert by_id == want
