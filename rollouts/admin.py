from __future__ import annotations

from django.contrib import admin

from rollouts.models import RollingUpdate, RolloutNode


class RolloutNodeInline(admin.TabularInline):
    model = RolloutNode
    extra = 0
    fields = ("node_name", "state", "batch_index", "reason")
    # States move only through the state machines in rollouts.models (audited); the admin shows them.
    readonly_fields = ("node_name", "state", "batch_index", "reason")


@admin.register(RollingUpdate)
class RollingUpdateAdmin(admin.ModelAdmin):
    list_display = ("name", "status", "strategy", "max_unavailable", "on_failure", "created_by", "created_at")
    list_filter = ("status", "strategy", "on_failure")
    search_fields = ("name",)
    readonly_fields = ("status", "plan", "created_at", "updated_at", "started_at", "finished_at")
    inlines = [RolloutNodeInline]
