"""The studies' questions, answered from a sweep's catalog (pure: tables in, tables out).

Study A (links): :func:`link_speedup`, :func:`shares_by_link`,
:func:`link_utilization`, :func:`scale_predictions`. Study B (volumes):
:func:`volume_by_op`, :func:`zero_ratio`, :func:`volume_vs_seq`,
:func:`size_histogram`. Every function returns an empty table when the grid
has nothing to say (e.g. one link only), and the report leaves it out.
"""

from __future__ import annotations

import math

import duckdb
import pyarrow as pa

from commlens.errors import UsageError
from commlens.netem.rate import parse_rate

# the same job, apart from the link
_JOB = "model, scheme, dp, tp, pp, seq_len, micro_batch, microbatches, nodes"


def link_rate(link: str) -> float:
    """bit/s of an emulated link; unshaped = inf; loopback (or a skipped point's bad rate) = nan."""
    if link == "loopback":
        return math.nan
    if link in ("unshaped", "none", ""):
        return math.inf
    try:
        return float(parse_rate(link))
    except UsageError:  # a point skipped for its bad link has no rate
        return math.nan


def _with_rates(con: duckdb.DuckDBPyConnection) -> None:
    links = [r[0] for r in con.execute("SELECT DISTINCT link FROM points").fetchall()]
    rates = [link_rate(lk) for lk in links]
    con.register(
        "link_rates",
        pa.table({"link": links, "rate": [r if not math.isnan(r) else None for r in rates]}),
    )


def points_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Every point with its headline figures, in grid order."""
    cols = {r[0] for r in con.execute("DESCRIBE points").fetchall()}
    best = "step_min_s" if "step_min_s" in cols else "step_s"
    return con.sql(
        f"""
        SELECT id, status, model, scheme, dp || '×' || tp || '×' || pp AS layout, seq_len,
               micro_batch, microbatches, network, step_s,
               {best} AS step_min_s, comm_share, exposed_share,
               tokens_per_s, peak_link_gbit_s,
               CASE WHEN validate_ok IS NULL THEN '-' WHEN validate_ok THEN 'ok'
                    ELSE 'MISMATCH' END AS validated,
               error
        FROM points ORDER BY rowid
        """
    ).to_arrow_table()


def link_speedup(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per job run over ≥ 2 links: step on the slowest and fastest link, and the speedup
    (with the two points' ids).

    Steps are each point's best measured step (``step_min_s``): on a shared machine
    other work only ever adds time, so the best step is the steadiest estimate.
    """
    _with_rates(con)
    cols = {r[0] for r in con.execute("DESCRIBE points").fetchall()}
    best = "coalesce(p.step_min_s, p.step_s)" if "step_min_s" in cols else "p.step_s"
    return con.sql(
        f"""
        WITH ok AS (
            SELECT p.* REPLACE ({best} AS step_s), r.rate
            FROM points p JOIN link_rates r USING (link)
            WHERE p.status = 'ok' AND r.rate IS NOT NULL
        ), ranked AS (
            SELECT *, row_number() OVER (PARTITION BY {_JOB} ORDER BY rate) AS lo,
                      row_number() OVER (PARTITION BY {_JOB} ORDER BY rate DESC) AS hi,
                      count(*) OVER (PARTITION BY {_JOB}) AS links
            FROM ok
        )
        SELECT s.model, s.scheme, s.dp || '×' || s.tp || '×' || s.pp AS layout,
               s.link AS slowest_link, s.step_s AS slowest_step_s,
               f.link AS fastest_link, f.step_s AS fastest_step_s,
               s.step_s / f.step_s AS speedup, s.links,
               s.id AS slowest_id, f.id AS fastest_id
        FROM ranked s JOIN ranked f USING ({_JOB})
        WHERE s.lo = 1 AND f.hi = 1 AND s.links >= 2
        ORDER BY s.model, s.scheme
        """
    ).to_arrow_table()


def shares_by_link(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per point on emulated links: comm share and the shares Study A singles out:
    the all-reduce of the scheme's own group (dp or tp) and the part of it spent
    in transfer once every rank arrived, the pipeline receive and
    the embedding all-reduce between first and last stage (all_reduce in the pp group)."""
    _with_rates(con)
    return con.sql(
        """
        WITH share AS (
            SELECT id,
                   sum(CASE WHEN op = 'all_reduce' AND role IN ('dp', 'tp')
                            THEN share_of_step ELSE 0 END) AS allreduce_share,
                   sum(CASE WHEN op = 'all_reduce' AND role IN ('dp', 'tp')
                            THEN coalesce(transfer_share, 0) ELSE 0 END)
                       AS allreduce_transfer_share,
                   sum(CASE WHEN op = 'recv' AND role = 'pp' THEN share_of_step ELSE 0 END)
                       AS pp_recv_share,
                   sum(CASE WHEN op = 'all_reduce' AND role = 'pp' THEN share_of_step ELSE 0 END)
                       AS embedding_allreduce_share
            FROM ops GROUP BY id
        )
        SELECT p.model, p.scheme, p.dp || '×' || p.tp || '×' || p.pp AS layout, p.link,
               r.rate / 1e9 AS link_gbit_s, p.step_s, p.comm_share, s.allreduce_share,
               s.allreduce_transfer_share,
               s.pp_recv_share, s.embedding_allreduce_share
        FROM points p JOIN link_rates r USING (link) JOIN share s USING (id)
        WHERE p.status = 'ok' AND r.rate IS NOT NULL
        ORDER BY p.model, p.scheme, r.rate
        """
    ).to_arrow_table()


def link_utilization(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per link rate: the highest and the mean NIC peak over its points (Gbit/s)."""
    _with_rates(con)
    return con.sql(
        """
        SELECT p.link, r.rate / 1e9 AS link_gbit_s, count(*) AS points,
               max(p.peak_link_gbit_s) AS peak_gbit_s,
               avg(p.peak_link_gbit_s) AS mean_peak_gbit_s,
               arg_max(p.scheme, p.peak_link_gbit_s) AS peak_scheme
        FROM points p JOIN link_rates r USING (link)
        WHERE p.status = 'ok' AND r.rate IS NOT NULL AND p.peak_link_gbit_s IS NOT NULL
        GROUP BY p.link, r.rate ORDER BY r.rate
        """
    ).to_arrow_table()


def scale_predictions(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The model at the studies' scale, per (model, scheme) and network, beside the
    speedup measured here from the slowest to the fastest link."""
    measured = link_speedup(con)
    con.register("measured_speedup", measured)
    return con.sql(
        """
        WITH pred AS (
            SELECT DISTINCT p.model AS point_model, p.scheme AS point_scheme,
                   q.model, q.dp || '×' || q.tp || '×' || q.pp AS layout, q.network,
                   q.step_s, q.comm_share, q.speedup
            FROM predictions q JOIN points p USING (id)
            WHERE q.scale = 'study'
        )
        SELECT pred.*, m.speedup AS measured_speedup
        FROM pred LEFT JOIN measured_speedup m
             ON m.model = pred.point_model AND m.scheme = pred.point_scheme
        ORDER BY point_model, point_scheme, speedup
        """
    ).to_arrow_table()


def volume_by_op(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per point, op and role: calls, bytes (S) and wire bytes per rank per step."""
    return con.sql(
        """
        SELECT p.model, p.scheme, p.seq_len, p.network, o.op, o.role, o.calls_per_rank_step,
               o.bytes_per_rank_step, o.wire_bytes_per_rank_step, o.share_of_step
        FROM ops o JOIN points p USING (id)
        WHERE p.status = 'ok'
        ORDER BY p.rowid, o.wire_bytes_per_rank_step DESC
        """
    ).to_arrow_table()


def zero_ratio(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Wire volume per rank per step of each scheme over DP's, same model, ranks and shapes."""
    return con.sql(
        """
        WITH ok AS (SELECT * FROM points WHERE status = 'ok')
        SELECT z.model, z.scheme, z.nproc, z.seq_len, z.network,
               z.wire_bytes_per_rank_step AS wire_bytes,
               d.wire_bytes_per_rank_step AS dp_wire_bytes,
               z.wire_bytes_per_rank_step / d.wire_bytes_per_rank_step AS ratio_to_dp
        FROM ok z JOIN ok d
          ON d.scheme = 'dp' AND z.model = d.model AND z.nproc = d.nproc
         AND z.seq_len = d.seq_len AND z.micro_batch = d.micro_batch
         AND z.microbatches = d.microbatches AND z.network = d.network
        WHERE z.scheme IN ('zero1', 'zero2', 'zero3') AND d.wire_bytes_per_rank_step > 0
        ORDER BY z.model, z.seq_len, z.scheme
        """
    ).to_arrow_table()


def volume_vs_seq(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Per (model, scheme): wire bytes per rank per step at each sequence length, and
    relative to the shortest (1.0 everywhere = flat; ∝ s = linear)."""
    return con.sql(
        """
        WITH ok AS (SELECT * FROM points WHERE status = 'ok'),
        base AS (
            SELECT model, scheme, network, arg_min(wire_bytes_per_rank_step, seq_len) AS w0,
                   min(seq_len) AS s0, count(DISTINCT seq_len) AS n
            FROM ok GROUP BY model, scheme, network
        )
        SELECT ok.model, ok.scheme, ok.network, ok.seq_len,
               ok.wire_bytes_per_rank_step AS wire_bytes,
               ok.wire_bytes_per_rank_step / b.w0 AS relative_volume,
               ok.seq_len::DOUBLE / b.s0 AS relative_seq_len
        FROM ok JOIN base b USING (model, scheme, network)
        WHERE b.n >= 2 AND b.w0 > 0
        ORDER BY ok.model, ok.scheme, ok.seq_len
        """
    ).to_arrow_table()


def size_histogram(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """Message counts per log2 size bucket per scheme and op (all measured steps, all ranks)."""
    return con.sql(
        """
        SELECT p.scheme, s.op, s.size_bucket_bytes, sum(s.count)::BIGINT AS count,
               sum(s.bytes)::BIGINT AS bytes
        FROM sizes s JOIN points p USING (id)
        WHERE p.status = 'ok'
        GROUP BY p.scheme, s.op, s.size_bucket_bytes
        ORDER BY p.scheme, s.op, s.size_bucket_bytes
        """
    ).to_arrow_table()


def validation_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    return con.sql(
        """
        SELECT id, CASE WHEN validate_ok THEN 'ok' ELSE 'MISMATCH' END AS verdict,
               validate_summary
        FROM points WHERE status = 'ok' AND validate_ok IS NOT NULL ORDER BY rowid
        """
    ).to_arrow_table()
