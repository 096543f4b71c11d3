"""examples/validate_matrix.py takes the flags its docstring shows, --quick among them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "validate_matrix.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("validate_matrix", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docstring_usage_parses() -> None:
    example = _example()
    usage = " ".join(line.strip() for line in example.__doc__.splitlines()[2:4])
    flags = re.findall(r"\[(--[a-z-]+)(?: ([^\]]+))?\]", usage)
    assert {f for f, _ in flags} >= {"--out", "--quick", "--model", "--seq-lens", "--only"}
    argv = [x for f, v in flags for x in ([f, v] if v else [f])]
    args = example.parse_args(argv)
    assert args.quick and args.out == "runs/validate"


def test_quick_is_the_two_rank_cases_at_one_length() -> None:
    example = _example()
    quick = example.plan(example.parse_args(["--quick"]))
    assert quick and {case[2] for case, _ in quick} == {2} and {s for _, s in quick} == {32}
    assert example.parse_args(["--quick"]).steps == 2
    full = example.plan(example.parse_args([]))
    assert len(full) == 2 * len(example.CASES) and {s for _, s in full} == {32, 64}
    assert [c[0] for c, _ in example.plan(example.parse_args(["--only", "dp,tp"]))] == [
        "dp", "tp", "dp", "tp",
    ]  # fmt: skip
