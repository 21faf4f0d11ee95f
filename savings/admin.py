from django.contrib import admin

from savings.models import SavingsSample


@admin.register(SavingsSample)
class SavingsSampleAdmin(admin.ModelAdmin):
    """Read-only: samples are recorded by the beat task and expired by it."""

    list_display = ["ts", "baseline_gpus", "gpus_used", "gpus_saved", "usd_per_hour", "kwh_per_hour"]
    date_hierarchy = "ts"
    readonly_fields = [f.name for f in SavingsSample._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
