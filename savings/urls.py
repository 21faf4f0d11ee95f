"""Web pages of savings, mounted at /savings/ (gpuplane/urls.py)."""
from django.urls import path

from savings import views

app_name = "savings"
urlpatterns = [
    path("", views.SavingsPageView.as_view(), name="savings"),
]
