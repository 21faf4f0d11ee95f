from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from lifecycle.admin import ServiceWrittenAdmin, ServiceWrittenInline
from scheduler.models import (
    CorrectionFactor,
    Decision,
    Deployment,
    LearnedWeights,
    NamespaceQuota,
    PartitionHold,
    Placement,
    ScalingEvent,
)


# Deployments, placements and holds change only through the services (deploy, release, moves),
# which take the placement lock and record audit events: the admin shows them and nothing more.
class PlacementInline(ServiceWrittenInline):
    model = Placement
    fields = ("replica_index", "node", "status", "workload_name", "sharing", "gpu_indexes", "share_milli", "memory_mib", "mig_profile")
    raw_id_fields = ("node",)


@admin.register(Deployment)
class DeploymentAdmin(ServiceWrittenAdmin):
    list_display = ("name", "namespace", "model", "memory_mib", "gpu_count", "replicas", "priority", "sharing", "status", "created_at")
    list_filter = ("status", "priority", "workload_type", "sharing", "namespace")
    search_fields = ("name", "model", "namespace")
    inlines = [PlacementInline]


class PartitionHoldInline(ServiceWrittenInline):
    model = PartitionHold
    raw_id_fields = ("partition",)


@admin.register(Placement)
class PlacementAdmin(ServiceWrittenAdmin):
    inlines = [PartitionHoldInline]
    list_display = ("__str__", "node", "status", "workload_name", "created_at")
    list_filter = ("status",)
    raw_id_fields = ("deployment", "node")


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    """Stored decision matrices, read-only: they record what the engine saw and chose."""

    list_display = ("__str__", "node", "profile", "duration_ms", "created_at")
    list_filter = ("outcome", "profile")
    search_fields = ("deployment__name", "deployment__namespace", "message")
    raw_id_fields = ("deployment", "node")
    readonly_fields = ("deployment", "replica_index", "outcome", "node", "profile", "weights", "matrix", "message",
                       "duration_ms", "created_at")

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(admin.ModelAdmin):
    """Quotas are edited here; the services enforce them on every deploy."""

    list_display = ("namespace", "max_gpu_milli", "max_memory_mib")
    search_fields = ("namespace",)


# Autoscaling and feedback rows are written by their services (with audit events): shown only.
@admin.register(ScalingEvent)
class ScalingEventAdmin(ServiceWrittenAdmin):
    list_display = ("deployment", "at", "policy", "action", "replicas_before", "replicas_after", "outcome")
    list_filter = ("policy", "action", "outcome")
    raw_id_fields = ("deployment",)


@admin.register(CorrectionFactor)
class CorrectionFactorAdmin(ServiceWrittenAdmin):
    list_display = ("model", "gpu_model", "sharing_mode", "factor", "observations", "updated_at")


@admin.register(LearnedWeights)
class LearnedWeightsAdmin(ServiceWrittenAdmin):
    list_display = ("profile", "frozen", "updated_at")
