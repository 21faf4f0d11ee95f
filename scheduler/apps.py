from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        """Answer the inventory's "who holds this partition?" with the scheduler's placements, and
        register the watch task in every process (web included): scheduler.services.watching looks
        it up in Celery's registry by name instead of importing scheduler.tasks."""
        from nodes.holds import register_holder
        from scheduler.holds import PlacementHolder

        register_holder(PlacementHolder())
        import scheduler.tasks  # noqa: F401

        post_migrate.connect(_after_migrate, sender=self)


def _after_migrate(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """Re-create the snapshot change-log triggers (a migration may have rebuilt a watched table on
    SQLite, dropping them), store the default priority levels a ``flush`` emptied, and forget this
    process's snapshot (``flush`` also ends here)."""
    from django.db import connections

    from scheduler import snapshot_triggers
    from scheduler.models import PriorityLevel
    from scheduler.services.priorities import ensure_default_levels
    from scheduler.services.snapshots import SNAPSHOTS

    connection = connections[using]
    tables = connection.introspection.table_names()
    if snapshot_triggers.LOG_TABLE in tables:
        snapshot_triggers.install(connection)
    if PriorityLevel._meta.db_table in tables and using == "default":
        ensure_default_levels()
    SNAPSHOTS.invalidate()
