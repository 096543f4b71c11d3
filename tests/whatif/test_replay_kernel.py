"""The replay's kernel compiled (numba) against the same code run as Python
(``NUMBA_DISABLE_JIT=1``): one algorithm, the same bytes, on a program with all that
the kernel handles (gloo's workers, a link two channels share, token buckets,
rendezvous and eager pairs, a ready notice behind a message back)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from commlens.errors import RunFormatError
from commlens.optable import GLOO
from commlens.whatif import engine
from commlens.whatif.costing import node_links
from commlens.whatif.durations import measured, measured_release
from commlens.whatif.model import Program, build_program
from commlens.whatif.optimes import Bucket, LinkUse, OpTimes
from commlens.whatif.replay import Timeline, replay
from tests.whatif.synthetic import Ev, make_trace
from tests.whatif.test_p2p import fabric, one_f_one_b

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("issue", "end", "held", "start", "by", "queued", "step_marks")


def program() -> Program:
    """Two 1F1B pipelines side by side on 2 nodes (0 -> 2 and 1 -> 3: node 0's link
    carries both), then three overlapped all-reduces of all four ranks and an eager send."""

    def ranks(a: int, b: int) -> list[Ev]:
        return [replace(e, rank=(a, b)[e.rank], peer=(a, b)[e.peer]) for e in one_f_one_b()]

    dp = {"group": "dp", "members": (0, 1, 2, 3), "is_async": True}
    events = ranks(0, 2) + ranks(1, 3)
    for r in range(4):
        events += [
            Ev(r, "all_reduce", 45 + r, 60, wait=1, **dp),  # type: ignore[arg-type]
            Ev(r, "all_reduce", 46 + r, 70, wait=2, **dp),  # type: ignore[arg-type]
            Ev(r, "all_reduce", 47 + r, 75, wait=2, **dp),  # type: ignore[arg-type]
        ]
    events += [Ev(0, "send", 80, 81, peer=2, role="pp"), Ev(2, "recv", 85, 90, peer=0, role="pp")]
    return build_program(make_trace(events, [(r, 0, 0, 95) for r in range(4)]))


def variants(prog: Program) -> dict[str, OpTimes]:
    """Op times that take the kernel through its paths."""
    n, n_inst = prog.inst.size, prog.instances
    recv = np.isin(np.arange(n), prog.recv_of)
    links = node_links(prog, fabric())
    nodes = [(0, 1) if len(g) == 4 else (0,) if g[0] < 2 <= g[1] else () for g in prog.cost_groups]
    bucket = Bucket(4e-6, np.full(n_inst, 12e-6), np.full(n_inst, 4e-6), nodes)
    workers = LinkUse(
        GLOO.workers, links=links, wire=np.full(n_inst, 8e-6), queued_wire=np.full(n_inst, 12e-6)
    )
    took = np.where(recv, 20e-6, 3e-6)
    return {
        "measured": OpTimes(measured(prog), measured_release(prog)),
        "one link": OpTimes(took, use=LinkUse(1, links=links)),
        "workers": OpTimes(took, use=replace(workers, link_wire=np.full(n_inst, 6e-6))),
        "buckets": OpTimes(
            took, use=replace(workers, bucket=bucket), drained=np.where(recv, 30e-6, 5e-6)
        ),
    }


def timelines(out: Path) -> None:
    """Replay every variant; the timelines into ``out`` (npz)."""
    prog = program()
    arrays = {}
    for name, times in variants(prog).items():
        tl = replay(prog, times)
        arrays.update({f"{name}/{f}": getattr(tl, f) for f in FIELDS})
    np.savez(out, **arrays)


def test_the_program_takes_the_kernel_through_its_paths() -> None:
    prog = program()
    assert (
        prog.behind.any() and prog.rendezvous.any() and not prog.rendezvous[prog.send_of >= 0].all()
    )
    links = node_links(prog, fabric())
    pairs = np.flatnonzero(links >= 0)
    assert len(set(prog.inst_group[pairs[links[pairs] == 0]].tolist())) == 2  # a shared link
    tls = {name: replay(prog, times) for name, times in variants(prog).items()}
    ends = {name: tl.end.tobytes() for name, tl in tls.items()}
    assert len(set(ends.values())) == len(ends)  # each variant its own answer
    assert tls["workers"].queued.any() and tls["buckets"].held.any()
    assert np.isfinite(np.concatenate([tl.end for tl in tls.values()])).all()


def test_the_compiled_kernel_and_its_python_give_the_same_bytes(tmp_path: Path) -> None:
    compiled, python = tmp_path / "compiled.npz", tmp_path / "python.npz"
    timelines(compiled)
    if os.environ.get("NUMBA_DISABLE_JIT") != "1":
        assert engine.run.signatures, "the kernel ran compiled"  # a numba dispatcher
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    code = "import sys; from tests.whatif.test_replay_kernel import timelines; "
    code += "from pathlib import Path; timelines(Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(python)], cwd=ROOT, env=env, check=True)
    a, b = np.load(compiled), np.load(python)
    assert sorted(a.files) == sorted(b.files)
    for name in a.files:
        assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes(), name


def test_the_timeline_keeps_its_types() -> None:
    prog = program()
    tl: Timeline = replay(prog, variants(prog)["measured"])
    assert [getattr(tl, f).dtype for f in FIELDS] == [np.float64] * 4 + [
        np.int32,
        np.bool_,
        np.float64,
    ]


def test_a_replay_that_deadlocks_is_one_error_line() -> None:
    # each rank blocks in the all-reduce the other issues only after its own
    events = [
        Ev(0, "all_reduce", 0, 10, group="a"),
        Ev(0, "all_reduce", 11, 20, group="b"),
        Ev(1, "all_reduce", 0, 10, group="b"),
        Ev(1, "all_reduce", 11, 20, group="a"),
    ]
    prog = build_program(make_trace(events, [(0, 0, 0, 20), (1, 0, 0, 20)]))
    with pytest.raises(RunFormatError) as err:
        replay(prog, OpTimes(np.full(4, 1e-6)))
    assert str(err.value) == (
        "synthetic: the replay deadlocked with rank 0 waiting (ops the capture saw complete "
        "depend on ops issued later); the run's event order is inconsistent"
    )
