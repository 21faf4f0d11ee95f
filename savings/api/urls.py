"""`/api/v1/` routes of savings, under the `savings-api` namespace."""
from django.urls import path

from savings.api import views

app_name = "savings-api"

urlpatterns = [
    path("savings/", views.SavingsView.as_view(), name="savings"),
]
