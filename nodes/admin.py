
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from lifecycle.admin import ServiceWrittenAdmin, ServiceWrittenInline
from nodes.holds import partition_holder, with_holder_id
from nodes.models import GPU, GPUSample, GPUSampleRollup, Node, NodeAgentToken, NodeGPUReport, Partition


# Inventory is what inventory sync found on the cluster (and placements' holds): shown, never edited here.
class GPUInline(ServiceWrittenInline):
    model = GPU
    fields = ("index", "uuid", "model", "memory_mib", "mig_enabled", "allocated_milli", "utilization_pct")
    readonly_fields = ("utilization_pct",)
    show_change_link = True


@admin.register(Node)
class NodeAdmin(ServiceWrittenAdmin):
    list_display = ("name", "gpu_model", "gpu_count", "sharing_mode", "sharing_replicas", "ready", "cordoned", "last_seen")
    list_filter = ("gpu_model", "sharing_mode", "ready", "cordoned")
    search_fields = ("name", "gpu_product")
    inlines = [GPUInline]


class HeldByMixin:
    """A read-only "held by" column: the partition's holder, linked, asked through nodes.holds.

    Holders are written by their own services only, never here. Rows come annotated with
    `holder_id`, so only held rows cost a query for their label.
    """

    def get_queryset(self, request: HttpRequest) -> QuerySet[Partition]:
        return with_holder_id(super().get_queryset(request))  # type: ignore[misc]

    @admin.display(description="held by")
    def held_by(self, partition: Partition) -> str:
        """The holder's label linked to its page, or "-" when not held."""
        if getattr(partition, "holder_id", None) is None:
            return "-"
        holder = partition_holder().describe([partition.pk]).get(partition.pk)
        return format_html('<a href="{}">{}</a>', holder.url, holder.label) if holder else "-"


class PartitionInline(HeldByMixin, ServiceWrittenInline):
    model = Partition
    fields = ("slot", "kind", "share_milli", "memory_mib", "mig_profile", "mig_start", "mig_size", "held_by", "pod")
    readonly_fields = ("held_by",)


@admin.register(GPU)
class GPUAdmin(ServiceWrittenAdmin):
    list_display = ("__str__", "uuid", "model", "memory_mib", "mig_enabled", "allocated_milli", "utilization_pct", "sampled_at")
    list_filter = ("model", "mig_enabled", "node__sharing_mode")
    search_fields = ("uuid", "node__name")
    list_select_related = ("node",)
    inlines = [PartitionInline]


@admin.register(Partition)
class PartitionAdmin(HeldByMixin, ServiceWrittenAdmin):
    list_display = ("__str__", "kind", "share_milli", "memory_mib", "mig_profile", "held_by", "pod")
    list_filter = ("kind", "mig_profile")
    search_fields = ("gpu__uuid", "gpu__node__name", "pod")
    list_select_related = ("gpu__node",)
    fields = (
        "gpu", "kind", "slot", "share_milli", "memory_mib", "mig_profile", "mig_start", "mig_size", "mig_device_uuid",
        "pod", "held_by",
    )
    readonly_fields = ("held_by",)


# --- telemetry ----------------------------------------------------------------------------------


class ReadOnlyAdmin(ServiceWrittenAdmin):
    """Rows written by the telemetry pipeline only; the admin may look, not edit."""


@admin.register(GPUSample)
class GPUSampleAdmin(ReadOnlyAdmin):
    list_display = ("gpu", "ts", "utilization_pct", "memory_used_mib", "power_w", "temperature_c", "source")
    list_filter = ("source",)
    search_fields = ("gpu__uuid", "gpu__node__name")
    list_select_related = ("gpu__node",)
    ordering = ("-ts",)
    # Millions of rows: counting them all for every page would be the slowest part of the page.
    show_full_result_count = False


@admin.register(GPUSampleRollup)
class GPUSampleRollupAdmin(ReadOnlyAdmin):
    list_display = (
        "gpu", "bucket_start", "bucket_s", "samples", "utilization_pct_avg", "utilization_pct_max", "power_w_avg",
        "temperature_c_max",
    )
    search_fields = ("gpu__uuid", "gpu__node__name")
    list_select_related = ("gpu__node",)
    ordering = ("-bucket_start",)
    show_full_result_count = False


@admin.register(NodeGPUReport)
class NodeGPUReportAdmin(ReadOnlyAdmin):
    """What each node's agent last reported of its GPUs (written by the agent's API call only)."""

    list_display = ("node", "revision", "applied_revision", "changed_at", "reported_at")
    search_fields = ("node__name",)
    list_select_related = ("node",)


@admin.register(NodeAgentToken)
class NodeAgentTokenAdmin(admin.ModelAdmin):
    """Tokens are created with `manage.py create_agent_token NODE` (the key is shown once there)."""

    list_display = ("prefix", "node", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked",)
    search_fields = ("prefix", "node__name")
    list_select_related = ("node",)
    fields = ("node", "prefix", "key_digest", "created_at", "last_used_at", "revoked")
    readonly_fields = ("node", "prefix", "key_digest", "created_at", "last_used_at")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeAgentToken]) -> None:
        count = queryset.filter(revoked=False).update(revoked=True)
        self.message_user(request, f"Revoked {count} agent token(s).")
