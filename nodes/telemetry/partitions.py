"""PostgreSQL only: raw samples in time-range partitions, created ahead and on demand, dropped whole.

On PostgreSQL, migration nodes/0009 makes the sample table a table partitioned by range of `ts`
(SQLite keeps the plain table, and every function here is then a no-op). Each partition holds
`partition_hours()` hours, aligned to the Unix epoch, so a retention window is about
PARTITIONS_PER_RETENTION partitions and expiry (nodes.telemetry.rollup) rolls up and DROPs a whole
partition once it lies wholly before the cutoff, instead of DELETEing rows one by one.

Partitions are made by `create_ahead` (the rollup beat task, every 5 minutes: the current one and
AHEAD_PARTITIONS more) and by `ensure_partitions` before each write that needs one (a poll at an
hour boundary before the task ran, an agent's late batch from an hour already dropped). A DEFAULT
partition takes any row no partition covers, so a write never fails for lack of one: this
process's cache of partitions it knows to exist may be stale (another process dropped one), and
a partition may be impossible to create (one of another width overlaps it after a retention
change). Creating a partition moves the default partition's rows of its range into it first;
rows left in the default partition are expired by DELETE, as on SQLite.
"""
from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from nodes.models import GPUSample

logger = logging.getLogger(__name__)

SAMPLE_TABLE = GPUSample._meta.db_table
DEFAULT_PARTITION = f"{SAMPLE_TABLE}_default"
# About this many partitions per raw retention window: few enough for the planner to prune
# cheaply, small enough that a dropped partition frees storage soon after it expires.
PARTITIONS_PER_RETENTION = 24
# Partitions created past the current one by create_ahead: a poll at the next boundary finds its own.
AHEAD_PARTITIONS = 2
# pg_advisory_xact_lock key serialising partition creation, so "exists? else create" is one step.
_CREATE_LOCK_KEY = 0x67707573  # "gpus"
_BOUND = re.compile(r"FOR VALUES FROM \('([^']+)'\) TO \('([^']+)'\)")

# (database name, partition start) of partitions this process created or found, once committed.
_known: set[tuple[str, datetime]] = set()
# database name -> whether its sample table is partitioned (a database migrated before 0009 is not).
_partitioned: dict[str, bool] = {}


@dataclass(frozen=True)
class SamplePartition:
    """One partition of the sample table: its name and the range [start, end) of `ts` it holds."""

    name: str
    start: datetime
    end: datetime


def partitioned() -> bool:
    """True when the sample table is partitioned: PostgreSQL, migrated to nodes/0009 or later."""
    if connection.vendor != "postgresql":
        return False
    database = connection.settings_dict["NAME"]
    if database not in _partitioned:
        with connection.cursor() as cursor:
            cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [SAMPLE_TABLE])
            row = cursor.fetchone()
        _partitioned[database] = row is not None and row[0] == "p"
    return _partitioned[database]


def forget() -> None:
    """Forget what this process knows of partitions (tests that drop or unmigrate them call it)."""
    _known.clear()
    _partitioned.clear()


def partition_hours() -> int:
    """Hours of samples per partition: the raw retention over PARTITIONS_PER_RETENTION, at least 1."""
    return max(1, math.ceil(settings.TELEMETRY_RAW_RETENTION_H / PARTITIONS_PER_RETENTION))


def partition_start(ts: datetime) -> datetime:
    """The start of the partition range holding `ts`; ranges are aligned to the Unix epoch."""
    width_s = partition_hours() * 3600
    epoch_s = math.floor(ts.timestamp())
    return datetime.fromtimestamp(epoch_s - epoch_s % width_s, tz=UTC)


def partition_name(start: datetime) -> str:
    return f"{SAMPLE_TABLE}_p{start:%Y%m%d%H}"


def ensure_partitions(times: Iterable[datetime]) -> int:
    """Make sure a partition exists for each of `times`; return how many were created.

    Known partitions cost nothing (no query); others are looked up and created under an
    advisory lock, in a transaction of their own unless the caller is in one. A partition that
    cannot be created is logged and skipped: its rows go to the default partition.
    """
    if not partitioned():
        return 0
    database = connection.settings_dict["NAME"]
    starts = {partition_start(ts) for ts in times}
    missing = sorted(start for start in starts if (database, start) not in _known)
    if not missing:
        return 0
    created = 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CREATE_LOCK_KEY])
        for start in missing:
            created += _create(cursor, start)
        # Remembered only once committed: a rolled-back creation must be looked up again.
        transaction.on_commit(lambda: _known.update((database, start) for start in missing))
    return created


def create_ahead(now: datetime) -> int:
    """Create the partition holding `now` and the AHEAD_PARTITIONS after it, where missing; return how many."""
    width = timedelta(hours=partition_hours())
    return ensure_partitions(partition_start(now) + width * k for k in range(AHEAD_PARTITIONS + 1))


def _create(cursor, start: datetime) -> int:
    """Create the partition starting at `start` unless it exists, moving the default partition's rows
    of its range into it (PostgreSQL refuses to create it while they are there); 1 if created."""
    name = partition_name(start)
    cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    if cursor.fetchone()[0]:
        return 0
    end = start + timedelta(hours=partition_hours())
    table, default = _quote(SAMPLE_TABLE), _quote(DEFAULT_PARTITION)
    in_range = "ts >= %s AND ts < %s"
    try:
        with transaction.atomic():  # a savepoint: a failure leaves the caller's transaction usable
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {default} WHERE {in_range})", [start, end])
            moving = cursor.fetchone()[0]
            if moving:
                cursor.execute(f"CREATE TEMPORARY TABLE gpusample_moving (LIKE {table})")
                cursor.execute(
                    f"WITH moved AS (DELETE FROM {default} WHERE {in_range} RETURNING *) "
                    "INSERT INTO gpusample_moving SELECT * FROM moved",
                    [start, end],
                )
            cursor.execute(
                f"CREATE TABLE {_quote(name)} PARTITION OF {table} "
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )
            if moving:
                cursor.execute(f"INSERT INTO {table} SELECT * FROM gpusample_moving")
                cursor.execute("DROP TABLE gpusample_moving")
    except DatabaseError:
        # E.g. a partition of another width (before a retention change) overlaps this range.
        logger.warning("telemetry: partition %s not created; its samples go to the default partition", name,
                       exc_info=True)
        return 0
    return 1


def sample_partitions() -> list[SamplePartition]:
    """The sample table's range partitions (not the default one), oldest first; [] unless partitioned."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [SAMPLE_TABLE],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.fullmatch(bound)
        if match:  # the DEFAULT partition's bound is "DEFAULT"
            start, end = (datetime.fromisoformat(value).astimezone(UTC) for value in match.groups())
            found.append(SamplePartition(name, start, end))
    return sorted(found, key=lambda partition: partition.start)


def drop_partition(name: str) -> None:
    """DROP one partition; forgotten by this process once committed. The caller owns the transaction."""
    with connection.cursor() as cursor:
        # Dropping a partition locks the parent table exclusively: wait for in-flight writes only briefly.
        cursor.execute("SET LOCAL lock_timeout = '10s'")
        # PostgreSQL refuses to drop a table with deferred foreign-key checks still pending, which
        # only happens when its rows were written in this same transaction (a test's): run them now,
        # then defer again (Django declares every foreign key DEFERRABLE INITIALLY DEFERRED).
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"DROP TABLE {_quote(name)}")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
    database = connection.settings_dict["NAME"]
    transaction.on_commit(lambda: _known.difference_update({key for key in _known if key[0] == database
                                                             and partition_name(key[1]) == name}))


def lock_partition(name: str) -> None:
    """Block writes to one partition until the transaction ends (reads go on): what a rollup reads is all there is."""
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {_quote(name)} IN SHARE MODE")


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)
