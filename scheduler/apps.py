from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        """Answer the inventory's "who holds this partition?" with the scheduler's placements."""
        from nodes.holds import register_holder
        from scheduler.holds import PlacementHolder

        register_holder(PlacementHolder())
