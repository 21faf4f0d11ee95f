"""The marks of a test that races database writers against each other (PostgreSQL only)."""
from __future__ import annotations

import pytest
from django.db import connection

POSTGRES_RACE = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql",
                       reason="needs PostgreSQL: SQLite serialises all writers, so there is no race to test"),
]
