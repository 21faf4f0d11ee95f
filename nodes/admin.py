from django.contrib import admin

from nodes.models import GPU, Node, Partition


class GPUInline(admin.TabularInline):
    model = GPU
    extra = 0
    fields = ("index", "uuid", "model", "memory_mib", "mig_enabled", "allocated_milli", "utilization_pct")
    readonly_fields = ("utilization_pct",)
    show_change_link = True


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ("name", "gpu_model", "gpu_count", "sharing_mode", "sharing_replicas", "ready", "cordoned", "last_seen")
    list_filter = ("gpu_model", "sharing_mode", "ready", "cordoned")
    search_fields = ("name", "gpu_product")
    inlines = [GPUInline]


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    fields = ("slot", "kind", "share_milli", "memory_mib", "mig_profile", "mig_start", "mig_size", "placement", "pod")
    raw_id_fields = ("placement",)


@admin.register(GPU)
class GPUAdmin(admin.ModelAdmin):
    list_display = ("__str__", "uuid", "model", "memory_mib", "mig_enabled", "allocated_milli", "utilization_pct", "sampled_at")
    list_filter = ("model", "mig_enabled", "node__sharing_mode")
    search_fields = ("uuid", "node__name")
    list_select_related = ("node",)
    inlines = [PartitionInline]


@admin.register(Partition)
class PartitionAdmin(admin.ModelAdmin):
    list_display = ("__str__", "kind", "share_milli", "memory_mib", "mig_profile", "placement", "pod")
    list_filter = ("kind", "mig_profile")
    search_fields = ("gpu__uuid", "gpu__node__name", "pod")
    list_select_related = ("gpu__node",)
    raw_id_fields = ("placement",)
