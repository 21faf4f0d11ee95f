"""`/api/v1/` routes of rollouts, under the `rollouts-api` namespace."""
from rest_framework.routers import SimpleRouter

from rollouts.api import views

app_name = "rollouts-api"

router = SimpleRouter()
router.include_format_suffixes = False
router.register("rollouts", views.RollingUpdateViewSet, basename="rollout")
urlpatterns = router.urls
