"""`/api/v1/` routes for the inventory, under the `nodes-api` namespace."""
from rest_framework.routers import DefaultRouter

from nodes.api import views

app_name = "nodes-api"

# No `.json` suffix routes: they would make `node-1.example.com` ambiguous (name "node-1.example",
# format "com"). `?format=json` still works.
router = DefaultRouter()
router.include_format_suffixes = False
router.register("nodes", views.NodeViewSet)
router.register("gpus", views.GPUViewSet)
router.register("partitions", views.PartitionViewSet)
urlpatterns = router.urls
