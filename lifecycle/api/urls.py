"""`/api/v1/` routes for the audit trail, under the `lifecycle-api` namespace."""
from rest_framework.routers import SimpleRouter

from lifecycle.api import views

app_name = "lifecycle-api"

router = SimpleRouter()
router.include_format_suffixes = False
router.register("audit-events", views.AuditEventViewSet)
urlpatterns = router.urls
