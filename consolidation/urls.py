"""Web pages of consolidation, mounted at /consolidation/ (gpuplane/urls.py)."""
from django.urls import path

from consolidation import views

app_name = "consolidation"
urlpatterns = [
    path("", views.PlanListView.as_view(), name="plan-list"),
    path("analyse/", views.PlanAnalyseView.as_view(), name="plan-analyse"),
    path("<int:pk>/<str:decision>/", views.PlanDecisionView.as_view(), name="plan-decide"),
]
