"""The Django admin of the audit trail, and the read-only admin every app uses for rows that only
its services may write (inventory, placements, deployments, telemetry): changing them here would
bypass the scheduler's locks, holds and audit events, so the admin shows them and nothing more."""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from lifecycle.models import AuditEvent


class ServiceWrittenMixin:
    """No add, change or delete in the admin: the row is written by a service (which says which)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ServiceWrittenAdmin(ServiceWrittenMixin, admin.ModelAdmin):
    pass


class ServiceWrittenInline(ServiceWrittenMixin, admin.TabularInline):
    extra = 0


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
