from django.urls import path

from nodes import views

app_name = "nodes"
urlpatterns = [
    path("nodes/", views.NodeListView.as_view(), name="node-list"),
    path("nodes/<str:name>/", views.NodeDetailView.as_view(), name="node-detail"),
    path("nodes/<str:name>/gpus/<int:index>/", views.GPUDetailView.as_view(), name="gpu-detail"),
]
