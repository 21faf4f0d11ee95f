from django.contrib import admin

from consolidation.models import ConsolidationPlan


@admin.register(ConsolidationPlan)
class ConsolidationPlanAdmin(admin.ModelAdmin):
    """Read-only: a plan changes only through approval and its executor (audited)."""

    list_display = ("id", "status", "gpus_freed", "savings_usd_per_hour", "created_at", "expires_at")
    list_filter = ("status",)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
