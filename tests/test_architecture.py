"""The layering rule of docs/architecture.md, checked over the import graph of src/.

Every ``import`` and ``from ... import`` in every module (at any depth: inside
functions and ``TYPE_CHECKING`` blocks too) is an arrow from its package to
the package it names. An arrow is allowed when it stays in its package, or
goes to the ground floor, or to a package that :data:`MAY_IMPORT` lists for
it, directly or through another it lists (the rule is transitive). The
table is the one docs/architecture.md shows.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "commlens"
ARCHITECTURE = SRC.parent.parent / "docs" / "architecture.md"

GROUND = frozenset({"errors", "safefile", "tempdirs", "units", "optable", "version", "numbers"})
# Package -> the packages it may import besides the ground floor (and, through
# them, those they may import). "commlens" is the package's own __init__ (the
# capture API: ``commlens.capture(...)``, ``commlens.load_run``).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "job": frozenset(),
    "trace": frozenset({"job"}),
    "capture": frozenset({"trace"}),
    "importers": frozenset({"trace"}),
    "launch": frozenset({"trace"}),
    "netem": frozenset({"launch"}),
    "commlens": frozenset({"capture"}),
    "analysis": frozenset({"trace"}),
    "predict": frozenset({"job", "netem"}),
    "doctor": frozenset({"analysis", "importers", "launch"}),
    "workloads": frozenset({"commlens"}),
    "bench": frozenset({"predict", "workloads"}),
    "whatif": frozenset({"analysis", "predict"}),
    "sweep": frozenset({"analysis", "predict", "workloads"}),
    "report": frozenset({"bench", "doctor", "sweep", "whatif"}),
    "cli": frozenset({"report"}),
    "__main__": frozenset({"cli"}),
}
# Imports against the rule in files another helper is changing this session,
# each with its owner; remove an entry as soon as its import is gone (the test
# fails on an entry that no longer matches anything).
KNOWN: dict[tuple[str, str], str] = {
    # the run's summary after `commlens run` reads the analyses (helper "text").
    ("workloads/summary.py", "analysis"): "text",
}


def _package(module: str) -> str | None:
    """The package of a ``commlens...`` module name (a top-level module is its own)."""
    parts = module.split(".")
    if parts[0] != "commlens":
        return None
    if len(parts) == 1:
        return "commlens"
    return parts[1]


def _imports(text: str, module: str, package_init: bool = False) -> set[str]:
    """Every module that ``text`` (the source of ``module``) imports, relative imports
    resolved, at any depth."""
    base = module.split(".")
    if not package_init:
        base = base[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                if node.module:
                    names.add(".".join([*anchor, node.module]))
                else:  # from . import a, b: each is a module (or a name) of the anchor
                    names.update(".".join([*anchor, alias.name]) for alias in node.names)
            elif node.module:
                names.add(node.module)
    return names


@cache
def _reach(package: str) -> frozenset[str]:
    """What ``package`` may import: its own, the ground floor, and the rule's closure."""
    out = set(GROUND) | {package}
    for below in MAY_IMPORT.get(package, frozenset()):
        out |= _reach(below)
    return frozenset(out)


def arrows() -> list[tuple[str, str, str]]:
    """(file relative to src/commlens, its package, the package it imports), for every
    import that leaves the file's package."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        module = ".".join(("commlens", *rel.with_suffix("").parts)).removesuffix(".__init__")
        source = _package(module)
        assert source is not None
        for name in _imports(path.read_text(), module, path.name == "__init__.py"):
            target = _package(name)
            if target is not None and target != source:
                out.append((rel.as_posix(), source, target))
    return out


def test_every_package_is_placed_by_the_rule() -> None:
    packages = {source for _, source, _ in arrows()} | {t for _, _, t in arrows()}
    assert packages <= GROUND | set(MAY_IMPORT), packages - GROUND - set(MAY_IMPORT)


def test_no_import_goes_against_the_layering_rule() -> None:
    against = [
        f"{rel}: {source} -> {target}"
        for rel, source, target in arrows()
        if target not in _reach(source) and (rel, target) not in KNOWN
    ]
    assert not against, "imports against docs/architecture.md's rule:\n" + "\n".join(against)


def test_the_known_exceptions_still_exist() -> None:
    """An allowed exception whose import is gone is taken off the list."""
    present = {(rel, target) for rel, _, target in arrows()}
    assert set(KNOWN) <= present, set(KNOWN) - present


def test_the_rule_has_no_cycle_and_the_ground_floor_imports_only_itself() -> None:
    for package in MAY_IMPORT:
        for below in MAY_IMPORT[package]:
            assert package not in _reach(below), (package, below)
    for rel, source, target in arrows():
        if source in GROUND:
            assert target in GROUND, (rel, target)


def test_the_architecture_document_shows_the_same_rule() -> None:
    """Each package's row of the document's table lists what :data:`MAY_IMPORT` says."""
    text = ARCHITECTURE.read_text()
    for package, below in MAY_IMPORT.items():
        shown = ", ".join(f"`{b}`" for b in sorted(below)) or "—"
        assert f"| `{package}` | {shown} |" in text, (package, shown)


def test_imports_inside_functions_and_relative_ones_are_arrows_too() -> None:
    text = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..netem import nic\n"
        "def f():\n    import commlens.report.text\n    from . import timeline\n"
    )
    names = _imports(text, "commlens.analysis.rankpass")
    assert {"commlens.netem", "commlens.report.text", "commlens.analysis.timeline"} <= names
    assert {_package(n) for n in names} >= {"netem", "report", "analysis"}
    assert "netem" not in _reach("analysis") and "report" not in _reach("analysis")
    assert _imports("from .. import errors\n", "commlens.trace", True) == {"commlens.errors"}


MAX_FUNCTION_LINES = 100


def test_no_function_is_over_100_lines() -> None:
    """Small modules of small functions: none runs past 100 lines (decorators aside)."""
    long = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "\n".join(long)
