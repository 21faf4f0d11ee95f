"""Web pages of rollouts, mounted at /rollouts/ (gpuplane/urls.py)."""
from django.urls import path

from rollouts import views

app_name = "rollouts"
urlpatterns = [
    path("", views.RolloutListView.as_view(), name="rollout-list"),
    path("new/", views.RolloutCreateView.as_view(), name="rollout-new"),
    path("<int:pk>/", views.RolloutDetailView.as_view(), name="rollout-detail"),
]
