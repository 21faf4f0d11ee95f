from django.urls import path

app_name = "nodes"
urlpatterns: list = []
