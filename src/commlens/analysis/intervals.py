"""Union of time intervals in SQL, so overlapping ops are counted once.

``union_sql`` merges, per partition, the intervals ``[start, end]`` of the
rows of a relation (gaps-and-islands: an interval opens a new island when it
starts after the running maximum of the ends before it) and returns one row
per island. Summing ``end - start`` over islands gives the covered time.
"""

from __future__ import annotations


def union_sql(source: str, keys: str, start: str, end: str) -> str:
    """SQL for the merged intervals of ``source`` per ``keys``.

    ``source`` is a relation (a table name or a parenthesised query), ``keys``
    a comma-separated list of its columns, ``start``/``end`` expressions in
    nanoseconds. Columns of the result: the keys, ``s``, ``e``.
    """
    return f"""
    (WITH iv AS (
        SELECT {keys}, {start} AS s, {end} AS e FROM {source} WHERE {end} >= {start}
    ), run_max AS (
        SELECT *, max(e) OVER (PARTITION BY {keys} ORDER BY s, e
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM iv
    ), islands AS (
        SELECT *, sum(CASE WHEN prev_end IS NULL OR s > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY {keys} ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island
        FROM run_max
    )
    SELECT {keys}, min(s) AS s, max(e) AS e FROM islands GROUP BY {keys}, island)
    """
