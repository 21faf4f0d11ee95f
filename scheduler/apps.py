from django.apps import AppConfig


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
