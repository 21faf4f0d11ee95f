"""gpuplane.database_settings: the SQLite file is in WAL mode with full sync; PostgreSQL's settings untouched."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.db.backends.sqlite3.base import DatabaseWrapper

from gpuplane.database_settings import databases


def test_the_default_sqlite_database_runs_in_wal_mode_with_full_sync(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("DATABASE_CONN_MAX_AGE", raising=False)
    config = databases(tmp_path)["default"]
    assert config["NAME"] == str(tmp_path / "gpuplane.sqlite3")
    assert config["CONN_MAX_AGE"] == 0

    wrapper = DatabaseWrapper({**config, "TIME_ZONE": None}, alias="wal-check")
    # The connection as Django opens it (its init commands run), without the suite's test database.
    connection = wrapper.get_new_connection(wrapper.get_connection_params())
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: a commit survives a power loss
    finally:
        connection.close()
    # Still the write lock at the start of each transaction (a read-then-write cannot deadlock).
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"


@pytest.mark.parametrize(("age", "expected"), [(None, 60), ("0", 0)])
def test_postgresql_keeps_its_connection_reuse_and_no_sqlite_options(monkeypatch, tmp_path: Path, age, expected):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db:5432/gpuplane")
    if age is None:
        monkeypatch.delenv("DATABASE_CONN_MAX_AGE", raising=False)
    else:
        monkeypatch.setenv("DATABASE_CONN_MAX_AGE", age)
    config = databases(tmp_path)["default"]
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["CONN_MAX_AGE"] == expected
    assert "init_command" not in config.get("OPTIONS", {})
