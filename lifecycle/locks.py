"""Single-run guards for periodic (beat) tasks, kept in Django's cache.

A beat task must not run twice at once (the second would redo the first's work or wait on its
row locks), and some must run once per interval even when two beats send it. Both guards are
`cache.add`, which is atomic on every Django cache backend (Redis `SET NX` in every multi-host
deployment; see settings.CACHES). A guard spans what the configured cache spans: every worker
process and host with a shared cache (Redis, Memcached, database), only the current process
with the local-memory cache.

Typical use in a task::

    with single_run("gpuplane:<app>:<task>:lock", ttl_s=TIME_LIMIT_S + 30) as acquired:
        if not acquired:
            return {"skipped": True, "reason": "previous run still going"}
        return do_the_work().as_dict()

Nothing here is released by a timer or a signal: a guard whose owner died (a worker killed by
its hard time limit) frees itself by expiry only, so `ttl_s` must outlast the task's run.

`tick_lock` is the guard for ticks that must never run twice at once yet must not stall after a
crash (the rollout reconciler, the consolidation executor): on PostgreSQL a session advisory
lock, which the server drops the moment its holder's connection dies.
"""
from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import cache
from django.db import DatabaseError, connection


@contextmanager
def single_run(key: str, ttl_s: float) -> Iterator[bool]:
    """Take the lock `key` for the body of the `with` if nobody holds it; yield whether this caller got it.

    A caller that got it holds it until the body ends (normally or by an exception), or until
    `ttl_s` seconds have passed, whichever comes first; choose `ttl_s` at least the task's hard
    time limit, so the lock changes hands by expiry only once its owner's run is certainly over.
    A caller that did not get it must not do the work; nothing is released on its way out.
    On release the lock is deleted only if it still holds this caller's token: when ours expired
    and another run took it, theirs stays.
    """
    token = uuid.uuid4().hex
    acquired = bool(cache.add(key, token, timeout=ttl_s))
    try:
        yield acquired
    finally:
        if acquired:
            _release_if_owner(key, token)


def claim_slot(key: str, ttl_s: float) -> bool:
    """Claim `key` for `ttl_s` seconds; True for the first caller only, False for every other until it expires.

    Never released: the claim is what remembers that the work of this slot (an interval, see
    `interval_slot`) was done or is being done, so a second beat or a re-delivered message for
    the same slot does nothing. Choose `ttl_s` longer than the slot, so a message delivered late
    in the slot still finds the claim.
    """
    return bool(cache.add(key, uuid.uuid4().hex, timeout=ttl_s))


def interval_slot(interval_s: float, now_s: float | None = None) -> int:
    """The number of the `interval_s`-second slot holding `now_s` (Unix seconds, default now): floor(now_s / interval_s).

    Slots are aligned to the Unix epoch, so every process and host counts the same slots.
    """
    return int((time.time() if now_s is None else now_s) // interval_s)


def _release_if_owner(key: str, token: str) -> None:
    # Read-then-delete is not one atomic step (the cache API has no compare-and-delete): another
    # caller's lock could only be deleted if ours expired between the two calls, which a `ttl_s`
    # longer than the run rules out.
    if cache.get(key) == token:
        cache.delete(key)


def advisory_key(name: str) -> int:
    """A stable 32-bit key for ``name`` (pg_try_advisory_lock takes a bigint; every process computes the same)."""
    return zlib.crc32(name.encode())


@contextmanager
def tick_lock(name: str, *, ttl_s: float) -> Iterator[bool]:
    """Hold the lock ``name`` for the body of the ``with`` if nobody holds it; yield whether this caller got it.

    Two ticks at once would drive the same step twice (place two copies of a replica). A worker
    killed mid-tick (SIGKILL, OOM, a lost host) runs no ``finally``, so an expiring lock
    (``single_run``) would hold every later tick off until it expires. On PostgreSQL the lock is
    therefore a session advisory lock on the tick's connection: the server drops it the moment
    that connection closes, which a dead process's does at once. It is a session lock, not a
    transaction one, so the steps still commit as they go (their progress must survive the crash
    they protect against). Elsewhere (SQLite, development) it falls back to ``single_run``, whose
    ``ttl_s`` (the task's hard time limit and more) then holds ticks off after a crash.
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


def transaction_lock(name: str) -> None:
    """Inside ``transaction.atomic()``: wait for, and hold until the transaction ends, the lock ``name``.

    On PostgreSQL a transaction-scoped advisory lock (``pg_advisory_xact_lock``), so writers that
    read-check-then-write (two approvals checking each other's plans) take turns. Elsewhere it
    does nothing: SQLite lets one writer commit at a time, and the checks that must hold in any
    case run again under a ``tick_lock`` (the executor's).
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [advisory_key(name)])
