from django.apps import AppConfig


class GpuplaneConfig(AppConfig):
    name = "gpuplane"
    verbose_name = "gpuplane"

    def ready(self) -> None:
        """Have each telemetry poll and inventory sync refresh the fleet pages' per-poll figures;
        record sign-ins, role changes and token revocations (gpuplane/accounts.py)."""
        from gpuplane import accounts
        from gpuplane.views import refresh_fleet_pages
        from nodes.fleet import register_per_poll

        register_per_poll(refresh_fleet_pages)
        accounts.connect()
