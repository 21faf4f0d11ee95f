"""Move API tokens from DRF's authtoken table (plain-text keys) to knox (digests with an expiry).

Every existing key keeps working: its digest goes into knox's table, expiring one token
lifetime (settings.GPUPLANE_API_TOKEN_TTL_H) after this migration. The plain-text rows are then
deleted (with SQLite's secure_delete on, so the keys do not linger in free pages of the file).
The authtoken app is no longer installed, so its table is read with SQL when it exists; a new
database has none and nothing happens.

Not reversible: the keys cannot be rebuilt from their digests (reversing leaves the tokens in
knox's table, where they keep working).
"""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import migrations
from django.utils import timezone
from django.utils.dateparse import parse_datetime

LEGACY_TABLE = "authtoken_token"


def _aware(value: Any) -> datetime:
    """A timestamp read with raw SQL: SQLite gives naive UTC (or text), PostgreSQL an aware datetime."""
    if isinstance(value, str):
        value = parse_datetime(value)
    return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value


def hash_legacy_tokens(apps: Any, schema_editor: Any) -> None:
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS, knox_settings

    connection = schema_editor.connection
    if LEGACY_TABLE not in connection.introspection.table_names():
        return
    AuthToken = apps.get_model("knox", "AuthToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name('key')}, user_id, created FROM {LEGACY_TABLE}")
        rows = cursor.fetchall()
    expiry = timezone.now() + knox_settings.TOKEN_TTL
    for key, user_id, created in rows:
        digest = hash_token(key)
        AuthToken(digest=digest, token_key=key[: CONSTANTS.TOKEN_KEY_LENGTH], user_id=user_id, expiry=expiry).save(
            force_insert=True
        )
        # `created` is auto_now_add: keep when the key was really issued.
        AuthToken.objects.filter(digest=digest).update(created=_aware(created))
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA secure_delete = ON")
        cursor.execute(f"DELETE FROM {LEGACY_TABLE}")


class Migration(migrations.Migration):
    dependencies = [("knox", "0009_extend_authtoken_field")]

    operations = [migrations.RunPython(hash_legacy_tokens, migrations.RunPython.noop)]
