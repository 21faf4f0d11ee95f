"""Web pages of the audit trail, mounted at /activity/ (gpuplane/urls.py)."""
from django.urls import path

from lifecycle import views

app_name = "lifecycle"
urlpatterns = [
    path("", views.ActivityView.as_view(), name="activity"),
]
