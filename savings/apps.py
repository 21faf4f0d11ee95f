from django.apps import AppConfig


class SavingsConfig(AppConfig):
    name = "savings"
    verbose_name = "Savings"

    def ready(self) -> None:
        """Put the savings gauges on /metrics (gpuplane.observability asks its registered collectors)."""
        from gpuplane.observability import register_collector
        from savings.metrics import SavingsCollector

        register_collector(SavingsCollector())
