"""The Disruptions page, mounted at /disruptions/ (gpuplane/urls.py)."""
from django.urls import path

from scheduler.disruptions import MoveListView

app_name = "disruptions"
urlpatterns = [path("", MoveListView.as_view(), name="move-list")]
