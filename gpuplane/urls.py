from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from gpuplane.api_root import APIRootView
from gpuplane.observability import DCGMExpositionView, MetricsView
from gpuplane.ratelimits import limit_sign_in
from gpuplane.token_api import ObtainTokenView
from gpuplane.views import OverviewView
from scheduler.webhook import mutate_pods

urlpatterns = [
    # Before admin.site.urls, so that this rate-limited wrapper answers /admin/login/ (gpuplane/ratelimits.py).
    path("admin/login/", limit_sign_in(admin.site.login)),
    path("admin/", admin.site.urls),
    # The sign-in page for every role; Django's admin login admits staff only.
    path(
        "accounts/login/",
        limit_sign_in(
            auth_views.LoginView.as_view(template_name="registration/login.html", redirect_authenticated_user=True)
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/auth/token/", ObtainTokenView.as_view(), name="api-token"),
    path("api/v1/", APIRootView.as_view(), name="api-root"),
    path("api/v1/", include("nodes.api.urls")),
    path("api/v1/", include("scheduler.api.urls")),
    path("api/v1/", include("lifecycle.api.urls")),
    path("api/v1/", include("rollouts.api.urls")),
    path("api/v1/", include("savings.api.urls")),
    path("api/v1/", include("consolidation.api.urls")),
    # Prometheus scrapes this; open unless GPUPLANE_METRICS_TOKEN is set (gpuplane/observability.py).
    path("metrics", MetricsView.as_view(), name="metrics"),
    # The latest per-GPU readings in DCGM exporter's format, for Prometheus as the time-series store.
    path("metrics/dcgm", DCGMExpositionView.as_view(), name="metrics-dcgm"),
    # The admission webhook: the API server posts AdmissionReviews (scheduler/webhook.py).
    path("webhooks/mutate-pods", mutate_pods, name="webhook-mutate-pods"),
    path("deployments/", include("scheduler.urls")),
    path("rollouts/", include("rollouts.urls")),
    path("savings/", include("savings.urls")),
    path("consolidation/", include("consolidation.urls")),
    path("disruptions/", include("scheduler.disruption_urls")),
    path("activity/", include("lifecycle.urls")),
    path("", OverviewView.as_view(), name="overview"),
    path("", include("nodes.urls")),
]
