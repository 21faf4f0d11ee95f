"""The lock that keeps two reconciler ticks from running at once, freed by the death of its holder.

Two ticks at once would drive the same node step twice (place two copies of a replica, restore
a node the other is verifying). A worker killed mid-tick (SIGKILL, OOM, a lost host) runs no
``finally``, so a lock with an expiry (``lifecycle.locks.single_run``) would hold every later
tick off until it expires, minutes during which no rollout moves.

On PostgreSQL the lock is therefore a session advisory lock on the tick's database connection:
the server drops it the moment that connection closes, which a dead process's does at once. It
is a session lock, not a transaction one, so the steps still commit as they go (their progress
must survive the crash they protect against). Elsewhere (SQLite, development) it falls back to
the expiring cache lock: a killed worker there holds ticks off until ``ttl_s`` has passed.
"""
from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection

from lifecycle.locks import single_run


def advisory_key(name: str) -> int:
    """A stable 32-bit key for ``name`` (pg_try_advisory_lock takes a bigint; every process computes the same)."""
    return zlib.crc32(name.encode())


@contextmanager
def tick_lock(name: str, *, ttl_s: float) -> Iterator[bool]:
    """Hold the lock ``name`` for the body of the ``with`` if nobody holds it; yield whether this caller got it.

    ``ttl_s`` bounds the fallback cache lock only (choose the task's hard time limit and more).
    """
    if connection.vendor != "postgresql":
        with single_run(name, ttl_s=ttl_s) as acquired:
            yield acquired
        return
    key = advisory_key(name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        acquired = bool(cursor.fetchone()[0])
    try:
        yield acquired
    finally:
        if acquired:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except DatabaseError:  # the connection broke: the server dropped the lock with it
                pass
