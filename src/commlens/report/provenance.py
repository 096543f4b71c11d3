"""What a report's header says about a run imported from another tool's files.

An imported run's ``run.json`` carries ``import`` (written by
:mod:`commlens.importers.write`): the source format and version, the files,
what each time field means there, what was estimated and what is missing.
Every command that reads a run puts these facts in its header
(:func:`provenance_facts`) and words its measures by them
(:func:`exposed_meaning`, :func:`synthetic_times`), so that an estimate is
never shown as a measurement.
"""

from __future__ import annotations

from typing import Any

from commlens.trace.manifest import DEVICE_TIMES, SYNTHETIC_TIMES, time_semantics

CALLER_BLOCKED = "the caller blocked"
DEVICE_EXPOSED = "comm-kernel time not overlapped by compute kernels on its device"


def _import(manifest: dict[str, Any]) -> dict[str, Any] | None:
    prov = manifest.get("import")
    return prov if isinstance(prov, dict) else None


def is_imported(manifest: dict[str, Any]) -> bool:
    return _import(manifest) is not None


def exposed_meaning(manifest: dict[str, Any]) -> str:
    """What "exposed" is in this run: the caller blocked, or the device's unoverlapped
    time (the run's :func:`~commlens.trace.manifest.time_semantics`), or what the
    source says it is."""
    prov = _import(manifest)
    if prov is not None and isinstance(prov.get("exposed"), str) and prov["exposed"]:
        return str(prov["exposed"])
    return DEVICE_EXPOSED if time_semantics(manifest) == DEVICE_TIMES else CALLER_BLOCKED


def synthetic_times(manifest: dict[str, Any]) -> bool:
    """Whether the run's times are placeholders (an aggregate-only import): only
    counts and volumes are measurements."""
    return time_semantics(manifest) == SYNTHETIC_TIMES


def _join(items: Any, limit: int = 6) -> str:
    items = [str(i) for i in items] if isinstance(items, list) else []
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def provenance_facts(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """The header facts of an imported run (none for a run commlens captured)."""
    prov = _import(manifest)
    if prov is None:
        return []
    files: list[Any] = prov.get("files") or []
    version = f" ({prov['format_version']})" if prov.get("format_version") else ""
    facts = [("imported from", f"{prov.get('source_format', '?')}{version}, {len(files)} file(s)")]
    if synthetic_times(manifest):
        note = prov.get("times_note") or "only op counts and bytes are data"
        facts.append(("times", f"SYNTHETIC (not measured): {note}"))
    fields: dict[str, Any] = prov.get("time_fields") or {}
    for key, label in (
        ("t_issue_ns", "issue/start"),
        ("t_end_ns", "end"),
        ("t_wait_ns", "exposed"),
        ("clock", "clock"),
    ):
        if fields.get(key):
            facts.append((label, str(fields[key])))
    clock: dict[str, Any] = prov.get("clock") or {}
    if clock.get("residual_median_ns") is not None:
        facts.append(
            (
                "clock alignment",
                f"{clock.get('domains')} clock domains aligned on blocking collectives' ends; "
                f"residual median {clock['residual_median_ns'] / 1e3:.1f} us, "
                f"max {clock['residual_max_ns'] / 1e3:.1f} us",
            )
        )
    if prov.get("estimated"):
        facts.append(("estimated", _join(prov["estimated"])))
    if prov.get("missing"):
        facts.append(("not in the source", _join(prov["missing"])))
    if prov.get("notes"):
        facts.append(("source notes", _join(prov["notes"])))
    return facts
