"""Statuses only the Django side keeps (the request words are ``scheduler.core.types`` enums).

Labelled string enums like every other word of the vocabulary (``nodes.vocabulary``): the
members are plain strings for the database and type checkers, and Django's choices derive from
them (``choices=DeploymentStatus.choices`` on model fields, ``DeploymentStatus.choices()`` elsewhere).
"""
from nodes.vocabulary import LabelledStrEnum


class DeploymentStatus(LabelledStrEnum):
    PENDING = "pending", "Pending"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    DELETED = "deleted", "Deleted"


class PlacementStatus(LabelledStrEnum):
    RESERVED = "reserved", "Reserved"
    BINDING = "binding", "Binding"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    RELEASED = "released", "Released"


class DecisionOutcome(LabelledStrEnum):
    """What one replica's placement decision came to (scheduler.models.Decision.outcome)."""

    PLACED = "placed", "Placed by gpuplane"
    UNSCHEDULABLE = "unschedulable", "Unschedulable"
    DEFAULT_SCHEDULER = "default-scheduler", "Handed to the default scheduler"
    SKIPPED = "skipped", "GPU selection skipped"
