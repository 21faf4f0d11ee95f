"""Web pages of the placement engine, mounted at /deployments/ (gpuplane/urls.py)."""
from django.urls import path

from scheduler import views

app_name = "scheduler"
urlpatterns = [
    path("", views.DeploymentListView.as_view(), name="deployment-list"),
    path("new/", views.DeployView.as_view(), name="deployment-new"),
    path("admission-dry-run/", views.AdmissionDryRunView.as_view(), name="admission-dry-run"),
    path("<int:pk>/", views.DeploymentDetailView.as_view(), name="deployment-detail"),
    path("<int:pk>/delete/", views.DeploymentDeleteView.as_view(), name="deployment-delete"),
]
