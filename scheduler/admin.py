from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from gpuplane.roles import ADMIN, VIEWER, has_role
from lifecycle.admin import ServiceWrittenAdmin, ServiceWrittenInline
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL
from scheduler.models import (
    AdmissionSettings,
    CorrectionFactor,
    Decision,
    Deployment,
    LearnedWeights,
    NamespaceQuota,
    PartitionHold,
    Placement,
    PriorityLevel,
    ScalingEvent,
    SharingPolicy,
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


class AdminRoleEdits:
    """Viewers and operators read; only the admin role adds, changes or deletes (as in the API)."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, VIEWER)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, ADMIN)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, ADMIN)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, ADMIN)


class NamespaceQuotaForm(forms.ModelForm):
    """GPUs and GB, the units of the rest of the UI; the row keeps thousandths of a GPU and MiB."""

    gpus = forms.DecimalField(required=False, min_value=0, decimal_places=3, help_text="GPUs; empty = unlimited")
    memory_gb = forms.DecimalField(required=False, min_value=0, decimal_places=3,
                                   help_text="GB of GPU memory; empty = unlimited")

    class Meta:
        model = NamespaceQuota
        fields = ("namespace",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            if self.instance.max_gpu_milli is not None:
                self.initial["gpus"] = self.instance.max_gpu_milli / SHARE_MILLI_FULL
            if self.instance.max_memory_mib is not None:
                self.initial["memory_gb"] = self.instance.max_memory_mib / MIB_PER_GB

    def save(self, commit: bool = True) -> NamespaceQuota:
        gpus, memory = self.cleaned_data.get("gpus"), self.cleaned_data.get("memory_gb")
        self.instance.max_gpu_milli = None if gpus is None else int(gpus * SHARE_MILLI_FULL)
        self.instance.max_memory_mib = None if memory is None else int(memory * MIB_PER_GB)
        return super().save(commit)


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(AdminRoleEdits, admin.ModelAdmin):
    """Quotas are edited here (admins); the services enforce them on every deploy and admission."""

    form = NamespaceQuotaForm
    list_display = ("__str__", "namespace")
    search_fields = ("namespace",)


@admin.register(SharingPolicy)
class SharingPolicyAdmin(AdminRoleEdits, admin.ModelAdmin):
    list_display = ("name", "strategy", "precedence", "enabled", "updated_at")
    list_filter = ("strategy", "enabled")
    search_fields = ("name",)


@admin.register(PriorityLevel)
class PriorityLevelAdmin(AdminRoleEdits, admin.ModelAdmin):
    list_display = ("priority", "value", "preempts", "description")


@admin.register(AdmissionSettings)
class AdmissionSettingsAdmin(AdminRoleEdits, admin.ModelAdmin):
    list_display = ("__str__", "preemption_enabled", "preemption_delay_s")


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
