"""`/api/v1/` routes for the inventory, under the `nodes-api` namespace."""
from django.urls import path
from rest_framework.routers import SimpleRouter

from nodes.api import gpu_report, series, telemetry, views

app_name = "nodes-api"

# No `.json` suffix routes: they would make `node-1.example.com` ambiguous (name "node-1.example",
# format "com"). `?format=json` still works.
# SimpleRouter: no API root of its own; gpuplane/api_root.py lists every app's endpoints.
router = SimpleRouter()
router.include_format_suffixes = False
router.register("nodes", views.NodeViewSet)
router.register("gpus", views.GPUViewSet)
router.register("partitions", views.PartitionViewSet)
urlpatterns = router.urls + [
    # Chart data (nodes/api/series.py); the router's detail routes stop at `<lookup>/`, so no clash.
    path("gpus/<str:uuid>/series/", series.GPUSeriesView.as_view(), name="gpu-series"),
    path("nodes/<str:name>/series/", series.NodeSeriesView.as_view(), name="node-series"),
    path("heatmap/", series.HeatmapView.as_view(), name="heatmap"),
    # Node agents push GPU samples here (nodes/api/telemetry.py)...
    path("telemetry/", telemetry.TelemetryView.as_view(), name="telemetry"),
    # ... and report their node's GPUs as NVML sees them (nodes/api/gpu_report.py).
    path("nodes/<str:name>/gpu-report/", gpu_report.GPUReportView.as_view(), name="node-gpu-report"),
]
