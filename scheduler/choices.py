from django.db import models


class WorkloadType(models.TextChoices):
    INFERENCE = "inference", "Inference"
    SERVING = "serving", "Serving"
    TRAINING = "training", "Training"
    DEVELOPMENT = "development", "Development"
    BATCH = "batch", "Batch"


class Priority(models.TextChoices):
    HIGH = "high", "High"
    MEDIUM = "medium", "Medium"
    LOW = "low", "Low"


class SharingRequest(models.TextChoices):
    AUTO = "auto", "Automatic"
    EXCLUSIVE = "exclusive", "Exclusive"
    MIG = "mig", "MIG"
    MPS = "mps", "MPS (uniform)"
    MPS_WEIGHTED = "mps-weighted", "MPS (weighted)"
    TIMESLICE = "timeslice", "Time-slicing"


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
