"""A table too wide for the terminal is shown in parts that each repeat the row's key,
numbers included: the Steps table's ``step``, the size tables' ``size >=``."""

from __future__ import annotations

from typing import Any

import pytest

from commlens.analysis import open_run
from commlens.report.build import build_report
from commlens.report.text import TextRenderer, key_columns
from commlens.trace.synthetic import ev, write_run

WORLD = [0, 1]
SIZES = [4096, 65536, 1 << 20, 4 << 20]


def _events() -> list[dict[str, Any]]:
    """DDP's start-up: four broadcasts on one group that differ only by size (set-up,
    step -1), then three steps of one all-reduce."""
    events: list[dict[str, Any]] = []
    for r in WORLD:
        for i, size in enumerate(SIZES):
            events.append(ev(r, "broadcast", 100 + 200 * i, 250 + 200 * i, size=size, step=-1))
        for step in range(3):
            b = 1000 + step * 10_000.0
            events.append(
                ev(r, "all_reduce", b + 4000, b + 4500, size=1 << 20, step=step, role="dp",
                   phase="backward", module="layers.0.mlp")
            )  # fmt: skip
    return events


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> Any:
    run_dir = write_run(
        tmp_path_factory.mktemp("parts") / "run",
        _events(),
        world_size=2,
        steps={r: [(1000 + 10_000.0 * s, 11_000 + 10_000.0 * s) for s in range(3)] for r in WORLD},
    )
    view = open_run(run_dir)
    try:
        return build_report(view)
    finally:
        view.close()


def _cells(table: Any) -> list[tuple[str, ...]]:
    columns = [[str(c) for c in col._cells] for col in table.columns]
    return list(zip(*columns, strict=True))


@pytest.mark.parametrize("width", [80, 100, 120])
def test_every_part_of_a_split_table_names_its_rows(doc: Any, width: int) -> None:
    split = 0
    for section in doc.sections:
        parts = TextRenderer._tables(section, width)
        if len(parts) == 1:
            continue
        split += 1
        first = [str(c.header) for c in parts[0].columns]
        whole = list(zip(*(_cells(p) for p in parts), strict=True))
        for part in parts:
            headers = [str(c.header) for c in part.columns]
            rows = _cells(part)
            assert headers[:1] == first[:1], (section.title, width, headers)
            # the part's own rows tell apart every row the whole table tells apart
            if len(set(whole)) == len(whole):
                assert len(set(rows)) == len(rows), (section.title, width, headers)
    if width < 120:  # at 120 every table may fit whole
        assert split, f"no table needed parts at {width} columns: the test checks nothing"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_numeric_keys_are_repeated(doc: Any, width: int) -> None:
    text = TextRenderer(width=width).render(doc)
    for title, key in (("Steps", "step"), ("By op, group and message size", "size >=")):
        section = next(s for s in doc.sections if s.title.startswith(title))
        parts = TextRenderer._tables(section, width)
        for part in parts:
            assert key in [str(c.header) for c in part.columns], (title, width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    if width == 80:  # the Steps table does not fit 80 columns: its second part names the step
        section = next(s for s in doc.sections if s.title.startswith("Steps"))
        assert len(TextRenderer._tables(section, 80)) > 1


def test_key_columns() -> None:
    def fits(cols: list[int]) -> bool:
        return len(cols) <= 3

    text, num = False, True
    rows = [("broadcast", "0", "4.0 KiB", "1"), ("broadcast", "0", "64.0 KiB", "1")]
    assert key_columns([text, text, num, num], rows, fits) == [0, 1, 2]  # size tells them apart
    rows = [("all_reduce", "0", "1.0 MiB", "1"), ("broadcast", "0", "1.0 MiB", "1")]
    assert key_columns([text, text, num, num], rows, fits) == [0, 1]  # text keys as before
    steps = [("0", "2", "0.1"), ("1", "2", "0.1")]
    assert key_columns([num, num, num], steps, fits) == [0]  # the step
    assert key_columns([num, num, num], steps[:1], fits) == []  # one row: nothing to name
    same = [("a", "1", "1", "1", "x")] * 2
    assert key_columns([text, num, num, num, text], same, fits) == [0, 1, 2]  # as far as fits
