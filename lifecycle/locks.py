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
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.cache import cache


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
