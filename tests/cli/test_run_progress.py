"""`commlens run` says where it is before step 1: ranks started, joined, model built."""

from __future__ import annotations

from tests.runs import SharedRuns


def test_progress_before_the_first_step(shared_runs: SharedRuns) -> None:
    lines = shared_runs["dp"].stdout.splitlines()  # the session's 2-rank gpt-tiny dp run
    assert lines[0].startswith("commlens run: gpt-tiny · dp · dp=2 tp=1 pp=1 · 2 ranks (gloo)")
    order = [
        "starting 2 ranks...",
        "all 2 ranks joined the process group in ",
        "model built in ",
        "step 1/3  rank 0: loss",
        "2 measured steps: step ",
    ]
    found = [next(i for i, line in enumerate(lines) if line.startswith(o)) for o in order]
    assert found == sorted(found), lines
    assert lines[found[2]].endswith("step 1/3 running...")
