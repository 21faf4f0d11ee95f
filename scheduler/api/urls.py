"""`/api/v1/` routes of the scheduler, under the `scheduler-api` namespace."""
from rest_framework.routers import DefaultRouter

from scheduler.api import views

app_name = "scheduler-api"

router = DefaultRouter()
router.include_format_suffixes = False
router.register("deployments", views.DeploymentViewSet, basename="deployment")
# The router's API root view would clash with the inventory's at /api/v1/.
urlpatterns = [url for url in router.urls if url.name != "api-root"]
