"""`/api/v1/` routes of consolidation, under the `consolidation-api` namespace."""
from rest_framework.routers import SimpleRouter

from consolidation.api import views

app_name = "consolidation-api"

router = SimpleRouter()
router.include_format_suffixes = False
router.register("consolidations", views.ConsolidationPlanViewSet, basename="consolidation")
urlpatterns = router.urls
