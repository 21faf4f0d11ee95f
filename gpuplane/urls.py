from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.settings import api_settings

from gpuplane.api_root import APIRootView
from gpuplane.observability import MetricsView
from gpuplane.views import OverviewView

urlpatterns = [
    path("admin/", admin.site.urls),
    # The sign-in page for every role; Django's admin login admits staff only.
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(template_name="registration/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    # DRF's view names its own (unlimited) parsers; the project's limited ones replace them.
    path(
        "api/v1/auth/token/",
        ObtainAuthToken.as_view(parser_classes=api_settings.DEFAULT_PARSER_CLASSES),
        name="api-token",
    ),
    path("api/v1/", APIRootView.as_view(), name="api-root"),
    path("api/v1/", include("nodes.api.urls")),
    path("api/v1/", include("scheduler.api.urls")),
    path("api/v1/", include("lifecycle.api.urls")),
    # Prometheus scrapes this; open unless GPUPLANE_METRICS_TOKEN is set (gpuplane/observability.py).
    path("metrics", MetricsView.as_view(), name="metrics"),
    path("deployments/", include("scheduler.urls")),
    path("", OverviewView.as_view(), name="overview"),
    path("", include("nodes.urls")),
]
