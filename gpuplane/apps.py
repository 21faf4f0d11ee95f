from django.apps import AppConfig


class GpuplaneConfig(AppConfig):
    name = "gpuplane"
    verbose_name = "gpuplane"

    def ready(self) -> None:
        """Keep the scheduling cycle's freed memory in the process (gpuplane/allocator.py); have each
        telemetry poll and inventory sync refresh the fleet pages' per-poll figures; record sign-ins,
        role changes and token revocations (gpuplane/accounts.py)."""
        from gpuplane import accounts, allocator
        from gpuplane.views import refresh_fleet_pages
        from nodes.fleet import register_per_poll

        allocator.tune()
        register_per_poll(refresh_fleet_pages)
        accounts.connect()
