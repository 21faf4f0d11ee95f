"""The database settings (DATABASE_URL, DATABASE_CONN_MAX_AGE; docs/operations.md, "Configuration"):
``gpuplane.settings`` takes ``DATABASES`` into its namespace; kept apart to keep settings.py short.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url

from gpuplane.env import env_int, env_str


def databases(var_dir: Path) -> dict[str, dict[str, Any]]:
    """Django's DATABASES: DATABASE_URL, SQLite under `var_dir` by default."""
    url = env_str("DATABASE_URL", f"sqlite:///{var_dir / 'gpuplane.sqlite3'}")
    # PostgreSQL: a connection per request (new backend, cold caches) cost a deploy ~25 ms.
    conn_max_age = env_int("DATABASE_CONN_MAX_AGE", 0 if url.startswith("sqlite") else 60, minimum=0)
    default = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    if default["ENGINE"] == "django.db.backends.sqlite3":
        # Web, worker and beat share the file: wait for locks instead of failing at once, and take
        # the write lock when a transaction starts so that a read-then-write cannot deadlock.
        # WAL: readers never wait for the writer, and a commit appends to the log instead of
        # creating, syncing and deleting a rollback journal, which cost each agent post 0.6 ms of
        # CPU (bench/ingest.py). `synchronous` stays FULL (SQLite's default): a committed
        # transaction survives a power loss, as before.
        default.setdefault("OPTIONS", {}).update(
            {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL"}
        )
    return {"default": dict(default)}
