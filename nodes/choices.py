"""Named choices for inventory models (shared by models, filters, serializers and the UI)."""
from django.db import models


class SharingMode(models.TextChoices):
    """How a node's GPUs are shared; one mode per node because the device plugin config is per node."""

    EXCLUSIVE = "exclusive", "Exclusive (whole GPU)"
    MIG = "mig", "MIG"
    MPS = "mps", "MPS (uniform, device plugin)"
    MPS_WEIGHTED = "mps-weighted", "MPS (weighted, gpuplane daemon)"
    TIMESLICE = "timeslice", "Time-slicing"


class PartitionKind(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole GPU"
    MIG = "mig", "MIG instance"
    MPS = "mps", "MPS slot"
    MPS_WEIGHTED = "mps-weighted", "Weighted MPS share"
    TIMESLICE = "timeslice", "Time-slice replica"
