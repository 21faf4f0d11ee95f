"""A web worker's thread that keeps its placement snapshot warm between deploys.

Without it the first deploy a worker serves builds the whole snapshot (seconds at fleet scale),
and so does the first deploy after each telemetry poll (which changes every node's figures) and
after five idle minutes. The thread runs ``SnapshotCache.keep_warm`` every
``SNAPSHOT_WARM_INTERVAL_S``: incremental changes are applied as a deploy would apply them, and
a full rebuild is built beside the snapshot in use, so deploys never wait for one. Started by
gunicorn's ``post_worker_init`` hook (``gpuplane.gunicorn_hooks``), not at import: tests and
management commands import the WSGI application too.
"""
from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection

from scheduler.services.snapshots import SNAPSHOTS, SnapshotCache

logger = logging.getLogger(__name__)


def warm_once(cache: SnapshotCache = SNAPSHOTS) -> bool:
    """One pass; False (logged) when it failed, e.g. the database was unreachable."""
    try:
        cache.keep_warm()
    except Exception:
        logger.exception("could not bring the placement snapshot up to date; the next deploy will")
        if not connection.in_atomic_block:  # the thread's own connection, not a caller's transaction
            connection.close()  # a broken connection is reopened on the next pass
        return False
    return True


def start(interval_s: float | None = None) -> threading.Thread | None:
    """Start the daemon thread (None when the interval is 0: disabled)."""
    interval = settings.SNAPSHOT_WARM_INTERVAL_S if interval_s is None else interval_s
    if interval <= 0:
        return None
    thread = threading.Thread(target=_run, args=(interval,), name="snapshot-warmer", daemon=True)
    thread.start()
    logger.info("placement snapshot kept warm every %g s (pid %d)", interval, os.getpid())
    return thread


def _run(interval: float) -> None:
    while True:
        warm_once()
        time.sleep(interval)
