"""One role per process group for the whole run, from the ranks' final tables.

A group's role may become known only after its first ops were recorded
(DDP names its group when it is built, a DeviceMesh made later names an axis
over all ranks), so each rank keeps the final role of every group it used in
its metadata (``meta.group_roles``: group name -> role). A reader gives every
event of a group that role, whatever the event recorded (conventions §9):

- :func:`group_roles`: the run's table, from every rank's; where ranks
  disagree, the role most of them name wins (a tie: the lowest rank's), with
  a warning;
- :func:`role_sql`: the ``role`` column as SQL (a CASE over ``pg_name``);
- :func:`apply_roles`: the same on an Arrow table of one rank's events.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commlens.trace.manifest import Manifest


def group_roles(manifest: Manifest) -> tuple[dict[str, str], list[str]]:
    """(group name -> its one role, warnings) from the ranks' ``meta.group_roles``."""
    named: dict[str, dict[str, list[int]]] = {}  # group -> role -> ranks naming it
    warnings: list[str] = []
    for key, entry in sorted(manifest.data.get("ranks", {}).items(), key=lambda kv: int(kv[0])):
        meta = entry.get("meta") if isinstance(entry, dict) else None
        table = meta.get("group_roles") if isinstance(meta, dict) else None
        if table is None:
            continue
        if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in table.items()
        ):
            warnings.append(f"rank {key}'s meta.group_roles is not a table of names: ignored")
            continue
        for name, role in table.items():
            if role:
                named.setdefault(name, {}).setdefault(role, []).append(int(key))
    roles: dict[str, str] = {}
    for name, by_role in sorted(named.items()):
        order = sorted(by_role, key=lambda r: (-len(by_role[r]), by_role[r][0]))
        roles[name] = order[0]
        if len(order) > 1:
            said = "; ".join(f"{r} on ranks {','.join(map(str, by_role[r]))}" for r in order)
            warnings.append(
                f"ranks disagree on the role of group {name!r} ({said}): read as {order[0]}"
            )
    return roles, warnings


def role_sql(roles: dict[str, str], prefix: str = "") -> str:
    """The ``role`` column with each group's final role, as a SQL expression."""
    if not roles:
        return f"{prefix}role"
    cases = " ".join(f"WHEN {_literal(name)} THEN {_literal(r)}" for name, r in roles.items())
    return f"CASE {prefix}pg_name {cases} ELSE {prefix}role END"


def apply_roles(table: pa.Table, roles: dict[str, str]) -> pa.Table:
    """``table`` with each group's final role in its ``role`` column (which keeps its
    type: plain or dictionary-encoded strings); needs ``pg_name`` when it has ``role``."""
    if not roles or "role" not in table.column_names:
        return table
    pg, role = table.column("pg_name"), table.column("role")
    if [len(c) for c in pg.chunks] != [len(c) for c in role.chunks]:
        pg = pa.chunked_array([pg.combine_chunks()])
        role = pa.chunked_array([role.combine_chunks()])
    chunks = [_chunk(p, r, roles) for p, r in zip(pg.chunks, role.chunks, strict=True)]
    column = pa.chunked_array(chunks, role.type)
    return table.set_column(table.schema.get_field_index("role"), "role", column)


def _chunk(pg: pa.Array, role: pa.Array, roles: dict[str, str]) -> pa.Array:
    """One chunk of the role column, remapped through the dictionaries (no per-row Python)."""
    pg_d = pg if pa.types.is_dictionary(pg.type) else pc.dictionary_encode(pg)
    final = [roles.get(v) if v is not None else None for v in pg_d.dictionary.to_pylist()]
    if not any(final):
        return role
    role_d = role if pa.types.is_dictionary(role.type) else pc.dictionary_encode(role)
    words: list[str] = role_d.dictionary.to_pylist()
    index = {w: i for i, w in enumerate(words)}
    for r in final:
        if r and r not in index:
            index[r] = len(words)
            words.append(r)
    by_group = np.array([index[r] if r else -1 for r in final] + [-1], np.int32)
    new = by_group[_indices(pg_d, len(final))]
    old = _indices(role_d, -1)
    new = np.where(new >= 0, new, old).astype(np.int32, copy=False)
    null = new < 0  # a null role with no final one stays null
    indices = pa.array(new, mask=null if null.any() else None)
    out = pa.DictionaryArray.from_arrays(indices, pa.array(words, pa.string()))
    return out.cast(role.type) if out.type != role.type else out


def _indices(array: pa.DictionaryArray, null: int) -> np.ndarray:
    indices = array.indices
    if indices.null_count:
        indices = pc.fill_null(indices, null)
    return np.asarray(indices.to_numpy(zero_copy_only=False))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
