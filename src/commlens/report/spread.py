"""Per-rank columns of many ranks as a distribution, with the worst ranks by name."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

MANY_RANKS = 32
"""Above this many ranks a per-rank table is summarised, not only cut short."""
WORST = 5


def rank_spread_note(ranks: pa.Table, columns: list[tuple[str, str]]) -> str:
    """'comm (%) over 1024 ranks: min .. q1 .. median .. q3 .. max; highest: rank 7 (..)'
    per column ``(key, title)`` of share values, when ``ranks`` has more than
    :data:`MANY_RANKS` rows; else ''."""
    if ranks.num_rows <= MANY_RANKS:
        return ""
    rank = np.asarray(ranks.column("rank").to_numpy(zero_copy_only=False))
    lines = []
    for key, title in columns:
        values = np.asarray(ranks.column(key).to_numpy(zero_copy_only=False), dtype=float)
        keep = ~np.isnan(values)
        if not keep.any():
            continue
        v, r = values[keep], rank[keep]
        q = np.quantile(v, [0, 0.25, 0.5, 0.75, 1.0]) * 100
        worst = np.argsort(-v, kind="stable")[:WORST]
        named = ", ".join(f"rank {int(r[i])} ({100 * v[i]:.1f})" for i in worst)
        lines.append(
            f"{title} over {v.size} ranks: min {q[0]:.1f}, quartiles {q[1]:.1f} / {q[2]:.1f} / "
            f"{q[3]:.1f}, max {q[4]:.1f}; highest: {named}"
        )
    return "\n".join(lines)
