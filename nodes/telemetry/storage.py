"""The database statements of ingest: resolve GPU UUIDs in one read, insert samples, refresh GPU rows.

Raw SQL where the ORM cannot say what ingest needs: how many rows an INSERT that skips
duplicates really inserted, and an UPDATE that checks the row's `sampled_at` in the same atomic
step; on PostgreSQL, COPY. Callers own the transaction (`nodes.telemetry.ingest.write_samples`).
"""
from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, connection, transaction
from django.db.models.constants import OnConflict

from nodes.models import GPU, GPUSample
from nodes.telemetry.samples import LATEST_FIELDS, METRIC_FIELDS, SampleIn

# Rows per INSERT: keeps every statement under SQLite's 32,766 and PostgreSQL's 65,535 bound
# parameters (11 per row).
INSERT_CHUNK_ROWS = 1000
# Above this many UUIDs, resolving reads the whole GPU table instead of naming them: a poll asks
# for (nearly) the whole fleet, and an IN list of 40,000 costs more to build than the rows cost
# to read, and passes SQLite's 32,766 bound parameters.
RESOLVE_IN_LIST_MAX = 5000


class ResolvedGPU(NamedTuple):
    """What ingest needs of one GPU row: ids, when its latest values were taken, and what bounds its metrics."""

    id: int
    node_id: int
    sampled_at: datetime | None
    model: str  # catalog key ("" when unknown)
    memory_mib: int


def resolve_gpus(uuids: Iterable[str]) -> dict[str, ResolvedGPU]:
    """uuid -> ResolvedGPU for the GPUs that exist (unknown UUIDs are absent); one query.

    Up to RESOLVE_IN_LIST_MAX UUIDs are looked up by name, more by reading the whole table.
    """
    wanted = set(uuids)
    if not wanted:
        return {}
    sql, uuid_column = _resolve_statement(connection.vendor)
    params: list[str] = []
    if len(wanted) <= RESOLVE_IN_LIST_MAX:
        params = sorted(wanted)
        sql += f" WHERE {uuid_column} IN ({', '.join(['%s'] * len(params))})"
    # Plain SQL: an agent's post resolves 8 UUIDs, and compiling the ORM's query for them cost
    # ten times more CPU than running it.
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if connection.vendor != "sqlite":
        return {uuid: ResolvedGPU(pk, *rest) for uuid, pk, *rest in rows if uuid in wanted}
    # SQLite hands times back as text: made aware datetimes, as the other databases give them.
    convert = functools.partial(connection.ops.convert_datetimefield_value, expression=None, connection=connection)
    return {
        uuid: ResolvedGPU(pk, node_id, convert(sampled_at) if sampled_at else sampled_at, model, memory_mib)
        for uuid, pk, node_id, sampled_at, model, memory_mib in rows
        if uuid in wanted
    }


@functools.cache
def _resolve_statement(vendor: str) -> tuple[str, str]:
    """(`resolve_gpus`' SELECT of every GPU row, its uuid column) on this database, built once per process."""
    meta = GPU._meta
    quote = connection.ops.quote_name
    columns = ", ".join(quote(meta.get_field(name).column) for name in ("uuid", "id", "node", "sampled_at", "model", "memory_mib"))
    return f"SELECT {columns} FROM {quote(meta.db_table)}", quote(meta.get_field("uuid").column)


def insert_samples_ignoring_duplicates(
    rows: dict[tuple[int, datetime], SampleIn], source: str, *, copy: bool = True
) -> int:
    """INSERT the rows, keyed by (gpu id, ts), skipping pairs already stored; return how many were inserted.

    Django's bulk_create(ignore_conflicts=True) does not say how many rows it inserted, and the
    duplicate count is part of the API's answer; the statement's row count says it exactly, even
    when two identical batches race. On PostgreSQL, with `copy` (a poll), the rows are COPYed when
    none is a duplicate (`_copy_unless_duplicate`); otherwise (an agent's post of a few rows, for
    which COPY's savepoint costs more than it saves) one INSERT from the rows as JSON stores them.
    """
    table, columns, head, row_sql, suffix = _insert_statement(connection.vendor)
    postgresql = connection.vendor == "postgresql"
    # An agent's rows go to PostgreSQL as JSON (`_json_rows`), their times as ISO 8601 text.
    db_ts = _iso_times(ts for _, ts in rows) if postgresql and not copy else _db_times(ts for _, ts in rows)
    values = [
        (
            gpu_id,
            db_ts[ts],
            *(getattr(sample, name) for name in METRIC_FIELDS),
            source,
        )
        for (gpu_id, ts), sample in rows.items()
    ]
    if postgresql:
        if copy:
            copied = _copy_unless_duplicate(table, columns, values)
            if copied is not None:
                return copied
        with _binding_cursor() as cursor:
            # One statement whatever the rows, its one parameter the rows as JSON (`_json_rows`).
            cursor.execute(_insert_json_statement(), [_json_rows(values)])
            return int(cursor.rowcount)
    inserted = 0
    with connection.cursor() as cursor:
        for start in range(0, len(values), INSERT_CHUNK_ROWS):
            chunk = values[start : start + INSERT_CHUNK_ROWS]
            sql = f"{head} VALUES {', '.join([row_sql] * len(chunk))} {suffix}"
            cursor.execute(sql, [value for row in chunk for value in row])
            inserted += cursor.rowcount
    return inserted


@functools.cache
def _insert_json_statement() -> str:
    """PostgreSQL: the sample INSERT from a JSON array of rows, skipping (gpu, ts) pairs already stored."""
    meta = GPUSample._meta
    types = [meta.get_field(name).db_type(connection) for name in ("gpu", "ts", *METRIC_FIELDS, "source")]
    _, _, head, _, suffix = _insert_statement(connection.vendor)
    return f"{head} SELECT {_json_columns(types)} FROM json_array_elements(%s::json) AS r {suffix}"


def _json_columns(types: Iterable[str], aliases: Iterable[str] | None = None) -> str:
    """`(r->>0)::type0, (r->>1)::type1, ...` (each `AS` its alias, if given): the columns of each row
    `r` of a JSON array of rows (`_json_rows`)."""
    columns = [f"(r->>{position})::{db_type}" for position, db_type in enumerate(types)]
    if aliases is not None:
        columns = [f"{column} AS {alias}" for column, alias in zip(columns, aliases, strict=True)]
    return ", ".join(columns)


def _json_rows(rows: list[tuple[Any, ...]]) -> str:
    """PostgreSQL: rows as one JSON array of arrays, read back by `_json_columns` (a JSON null is NULL).

    psycopg dumps a Python list into an array parameter in Python, element by element: an agent's
    post spent a tenth of its CPU there with one array per column. This JSON text is made in C
    and is one text parameter; a float's JSON is its repr, which reads back as the same double.
    Times are best given as ISO 8601 text already (`_iso_times`); a datetime left is written so.
    """
    return json.dumps(rows, default=_iso_time)


def _iso_times(times: Iterable[datetime]) -> dict[datetime, str]:
    """Each distinct time as ISO 8601 text with its offset, which PostgreSQL reads as the same instant."""
    return {ts: ts.isoformat() for ts in set(times)}


def _iso_time(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@functools.cache
def _insert_statement(vendor: str) -> tuple[str, str, str, str, str]:
    """(table, column list, "INSERT ... INTO table (columns)", one row's placeholders, ON CONFLICT suffix)
    of the sample INSERT on this database: built once per process, not per agent post."""
    meta = GPUSample._meta
    fields = [meta.get_field(name) for name in ("gpu", "ts", *METRIC_FIELDS, "source")]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE)
    suffix = connection.ops.on_conflict_suffix_sql(fields, OnConflict.IGNORE, None, None)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return meta.db_table, columns, f"{insert} {quote(meta.db_table)} ({columns})", row_sql, suffix


def _copy_unless_duplicate(table: str, columns: str, values: list[tuple]) -> int | None:
    """PostgreSQL: COPY the rows in (a savepoint); their number, or None when one was already stored.

    COPY streams the rows instead of binding nine parameters per row into statements, but it
    cannot skip duplicates. A poll's rows are new but
    for a retried shard or a re-sent batch, so COPY is tried first; a unique violation rolls it
    back and the caller's INSERT ... ON CONFLICT DO NOTHING stores the batch instead. (The
    foreign key to the GPU is checked at commit, as with INSERT: deferred.)
    """
    quote = connection.ops.quote_name
    try:
        with transaction.atomic(), connection.cursor() as cursor, connection.wrap_database_errors:
            with cursor.cursor.copy(f"COPY {quote(table)} ({columns}) FROM STDIN") as copy:
                for row in values:
                    copy.write_row(row)
    except IntegrityError:
        return None
    return len(values)


def _db_times(times: Iterable[datetime]) -> dict[datetime, object]:
    """Each distinct time as the database takes it. A poll stamps its whole fleet with one time, and
    converting it once per sample (two Django field calls, timezone arithmetic) was a third of the
    CPU of storing it."""
    field = GPUSample._meta.get_field("ts")
    return {ts: field.get_db_prep_save(ts, connection) for ts in set(times)}


def update_latest_values(newest: dict[int, SampleIn]) -> None:
    """Copy each GPU's sample (keyed by GPU id) onto its row, where the row's sampled_at is null or older.

    One conditional UPDATE per GPU, sent with executemany (PostgreSQL: pipelined, one round
    trip): the comparison with the row's current sampled_at happens inside each UPDATE, so the
    check and the write are one atomic step even when batches for the same GPU race. (A single
    bulk_update-style CASE statement costs several times more CPU to build through the ORM.)
    """
    if not newest:
        return
    if connection.vendor == "postgresql":
        _update_latest_values_at_once(newest)
        return
    sql = _update_statement(connection.vendor)
    db_ts = _db_times(sample.ts for sample in newest.values())
    params = []
    for gpu_id, sample in sorted(newest.items()):  # id order: concurrent batches lock rows alike
        ts = db_ts[sample.ts]
        params.append(
            (ts, *(getattr(sample, name) for name in LATEST_FIELDS), _processes_json(sample), gpu_id, ts)
        )
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


@functools.cache
def _update_statement(vendor: str) -> str:
    """The conditional UPDATE of one GPU's latest values (built once per process)."""
    meta = GPU._meta
    quote = connection.ops.quote_name
    assignments = ", ".join(
        f"{quote(meta.get_field(name).column)} = %s" for name in ("sampled_at", *LATEST_FIELDS, "processes")
    )
    sampled_col = quote(meta.get_field("sampled_at").column)
    return (
        f"UPDATE {quote(meta.db_table)} SET {assignments} "
        f"WHERE {quote(meta.pk.column)} = %s AND ({sampled_col} IS NULL OR {sampled_col} < %s)"
    )


def _update_latest_values_at_once(newest: dict[int, SampleIn]) -> None:
    """PostgreSQL: update_latest_values as one UPDATE ... FROM the rows as JSON, same condition per row.

    One UPDATE per GPU was planned and executed one by one by the server: three quarters of a
    40,000-GPU poll's wall time on PostgreSQL. The GPUs' rows are first locked in id order (FOR NO
    KEY UPDATE, the lock UPDATE itself takes), so concurrent batches queue instead of deadlocking
    whatever order the join visits rows in; each row's `sampled_at` is compared under that lock,
    so the check and the write stay one atomic step per GPU.
    """
    times = _iso_times(sample.ts for sample in newest.values())
    rows = [
        (gpu_id, times[sample.ts], *(getattr(sample, name) for name in LATEST_FIELDS), _processes_json(sample))
        for gpu_id, sample in sorted(newest.items())
    ]
    with _binding_cursor() as cursor:
        cursor.execute(_update_at_once_statement(), [_json_rows(rows)])


@contextlib.contextmanager
def _binding_cursor() -> Iterator[Any]:
    """PostgreSQL: a psycopg cursor that sends parameters apart from the statement (server-side
    binding), on Django's connection and so inside its transaction. Django's own cursor quotes
    every array into the SQL text in Python: for an agent's post that was a fifth of its CPU."""
    import psycopg

    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor


@functools.cache
def _update_at_once_statement() -> str:
    """PostgreSQL's UPDATE ... FROM the rows as JSON of `_update_latest_values_at_once` (built once per
    process); each row is [id, sampled_at, *LATEST_FIELDS, processes as JSON text]."""
    meta = GPU._meta
    quote = connection.ops.quote_name
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    names = ("sampled_at", *LATEST_FIELDS, "processes")
    types = [meta.pk.db_type(connection), *(meta.get_field(name).db_type(connection) for name in names)]
    aliases = ["id", *(f"v{k}" for k in range(len(names)))]
    assignments = ", ".join(f"{quote(meta.get_field(name).column)} = v.v{k}" for k, name in enumerate(names))
    sampled_col = quote(meta.get_field("sampled_at").column)
    # `locked` locks in id order before any row is updated: whichever side the join takes first,
    # every updated row is one of `locked`, locked by its ordered scan. Both find their rows by
    # `= ANY(ARRAY(...))`, an index scan: with `IN (SELECT ...)` the planner, which guesses 100
    # rows for any JSON array, read the whole GPU table twice per agent post instead.
    return (
        f"WITH v AS (SELECT {_json_columns(types, aliases)} FROM json_array_elements(%s::json) AS r), "
        f"locked AS (SELECT {pk} FROM {table} WHERE {pk} = ANY(ARRAY(SELECT id FROM v)) ORDER BY {pk} FOR NO KEY UPDATE) "
        f"UPDATE {table} AS g SET {assignments} FROM v "
        f"WHERE g.{pk} = v.id AND g.{pk} = ANY(ARRAY(SELECT {pk} FROM locked)) "
        f"AND (g.{sampled_col} IS NULL OR g.{sampled_col} < v.v0)"
    )


def _processes_json(sample: SampleIn) -> str | None:
    """The sample's processes as the GPU row stores them, JSON `[[pid, used MiB or null], ...]`; None: not reported."""
    if sample.processes is None:
        return None
    return json.dumps([list(process) for process in sample.processes])
