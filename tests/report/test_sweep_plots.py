"""The sweep's message-size figure is a histogram (bars), not a line that drops to zero."""

from __future__ import annotations

import pyarrow as pa
from matplotlib.patches import Rectangle

from commlens.report.sweep_plots import sizes


def test_sizes_is_grouped_bars_over_every_log2_bucket() -> None:
    table = pa.table(
        {
            "scheme": ["dp", "dp", "tp"],
            "op": ["all_reduce", "broadcast", "all_reduce"],
            "size_bucket_bytes": [64, 1024, 256],
            "count": [10, 1, 4],
            "bytes": [640, 1024, 1024],
        }
    )
    ax = sizes(table).axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["64 B", "128 B", "256 B", "512 B", "1.0 KiB"]
    assert not ax.get_lines()
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(bars) == 2 * 5  # a bar per scheme in every bucket, empty ones at 0
    assert sorted(round(b.get_height()) for b in bars if b.get_height()) == [1, 4, 10]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["dp", "tp"]
