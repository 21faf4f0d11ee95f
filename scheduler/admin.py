from django.contrib import admin

from scheduler.models import Deployment, Placement


class PlacementInline(admin.TabularInline):
    model = Placement
    extra = 0
    fields = ("replica_index", "node", "status", "workload_name")
    raw_id_fields = ("node",)


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = ("name", "namespace", "model", "memory_mib", "gpu_count", "replicas", "priority", "sharing", "status", "created_at")
    list_filter = ("status", "priority", "workload_type", "sharing", "namespace")
    search_fields = ("name", "model", "namespace")
    inlines = [PlacementInline]


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    list_display = ("__str__", "node", "status", "workload_name", "created_at")
    list_filter = ("status",)
    raw_id_fields = ("deployment", "node")
