"""What runs where: deploy requests and their placements (filled in by the placement engine)."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler.choices import DeploymentStatus, PlacementStatus, Priority, SharingRequest, WorkloadType


class Deployment(models.Model):
    name = models.CharField(max_length=63)
    model = models.CharField(max_length=200, help_text="Model name, e.g. llama-3-8b")
    memory_mib = models.PositiveIntegerField(help_text="GPU memory the model needs per replica")
    gpu_count = models.PositiveSmallIntegerField(default=1, help_text="GPUs per replica (tensor-parallel size)")
    replicas = models.PositiveSmallIntegerField(default=1)
    workload_type = models.CharField(max_length=16, choices=WorkloadType.choices, default=WorkloadType.INFERENCE)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.MEDIUM)
    latency_slo_ms = models.PositiveIntegerField(null=True, blank=True)
    namespace = models.CharField(max_length=63, default="default")
    labels = models.JSONField(default=dict, blank=True)
    sharing = models.CharField(max_length=16, choices=SharingRequest.choices, default=SharingRequest.AUTO)
    enable_gpu_selection = models.BooleanField(default=True)
    status = models.CharField(max_length=16, choices=DeploymentStatus.choices, default=DeploymentStatus.PENDING)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="deployment_gpu_count_positive"),
            models.CheckConstraint(condition=Q(replicas__gte=1), name="deployment_replicas_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Placement(models.Model):
    """One replica of a Deployment bound to a node; its partitions say which GPUs and slices."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey("nodes.Node", on_delete=models.PROTECT, related_name="placements")
    replica_index = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=PlacementStatus.choices, default=PlacementStatus.RESERVED)
    workload_name = models.CharField(max_length=253, blank=True, help_text="Kubernetes workload created for it")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment_id", "replica_index"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "replica_index"], name="placement_unique_replica"),
        ]

    def __str__(self) -> str:
        return f"{self.deployment} #{self.replica_index} on {self.node}"
