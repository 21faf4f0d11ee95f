from django.contrib import admin

from lifecycle.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the trail is written by the services, never edited."""

    list_display = ["at", "actor", "verb", "object_type", "object_id", "object_repr", "reason"]
    list_filter = ["verb", "object_type", "actor"]
    search_fields = ["object_id", "object_repr", "reason", "actor"]
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
