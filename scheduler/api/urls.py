"""`/api/v1/` routes of the scheduler, under the `scheduler-api` namespace."""
from rest_framework.routers import SimpleRouter

from scheduler.api import views
from scheduler.api.moves import MoveViewSet

app_name = "scheduler-api"

# SimpleRouter: no API root of its own; gpuplane/api_root.py lists every app's endpoints.
router = SimpleRouter()
router.include_format_suffixes = False
router.register("deployments", views.DeploymentViewSet, basename="deployment")
router.register("moves", MoveViewSet, basename="move")
urlpatterns = router.urls
