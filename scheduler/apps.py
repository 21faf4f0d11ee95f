from django.apps import AppConfig


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        # Registers the watch task in Celery's registry in every process (web included), where
        # scheduler.services.watching looks it up by name instead of importing this module.
        import scheduler.tasks  # noqa: F401
