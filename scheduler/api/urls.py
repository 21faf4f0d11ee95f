"""`/api/v1/` routes of the scheduler, under the `scheduler-api` namespace."""
from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduler.api import admission, views
from scheduler.api.moves import MoveViewSet

app_name = "scheduler-api"

# SimpleRouter: no API root of its own; gpuplane/api_root.py lists every app's endpoints.
router = SimpleRouter()
router.include_format_suffixes = False
router.register("deployments", views.DeploymentViewSet, basename="deployment")
router.register("moves", MoveViewSet, basename="move")
router.register("sharing-policies", admission.SharingPolicyViewSet, basename="sharing-policy")
router.register("priority-levels", admission.PriorityLevelViewSet, basename="priority-level")
router.register("namespace-quotas", admission.NamespaceQuotaViewSet, basename="namespace-quota")
urlpatterns = [
    *router.urls,
    path("admission-settings/", admission.AdmissionSettingsView.as_view(), name="admission-settings"),
    path("admission/dry-run/", admission.AdmissionDryRunView.as_view(), name="admission-dry-run"),
]
