"""Statuses only the Django side keeps (the request words are ``scheduler.core.types`` enums)."""
from django.db import models


class DeploymentStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    DELETED = "deleted", "Deleted"


class PlacementStatus(models.TextChoices):
    RESERVED = "reserved", "Reserved"
    BINDING = "binding", "Binding"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    RELEASED = "released", "Released"


class DecisionOutcome(models.TextChoices):
    """What one replica's placement decision came to (scheduler.models.Decision.outcome)."""

    PLACED = "placed", "Placed by gpuplane"
    UNSCHEDULABLE = "unschedulable", "Unschedulable"
    DEFAULT_SCHEDULER = "default-scheduler", "Handed to the default scheduler"
    SKIPPED = "skipped", "GPU selection skipped"
