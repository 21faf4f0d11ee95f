"""The autoscaler's rows: scaling events (the timeline) and the feedback's correction factors and
learned weights. Part of the scheduler app's models (scheduler/models.py imports them)."""
from __future__ import annotations

from django.db import models


class ScalingEvent(models.Model):
    """One evaluation of a deployment's autoscaling, or a change of its replicas by hand.

    ``inputs`` are the metrics that drove it (the monitoring sample and what the policy derived),
    ``decision`` the policy's answer (``scheduler.core.autoscale.Decision.to_dict()``), ``outcome``
    what happened to it: applied, partly applied, failed, held (nothing to do) or no decision
    (the inputs could not be trusted; the reason is in ``message``).
    """

    class Outcome(models.TextChoices):
        APPLIED = "applied", "Applied"
        PARTIAL = "partial", "Partly applied"
        FAILED = "failed", "Failed"
        HELD = "held", "Held"
        NO_DECISION = "no-decision", "No decision"

    deployment = models.ForeignKey("scheduler.Deployment", on_delete=models.CASCADE, related_name="scaling_events")
    at = models.DateTimeField(db_index=True)
    policy = models.CharField(max_length=16, help_text="gpuplane, hpa, seed, static or manual")
    action = models.CharField(max_length=8, help_text="up, down, hold or none")
    replicas_before = models.PositiveSmallIntegerField()
    replicas_after = models.PositiveSmallIntegerField()
    inputs = models.JSONField(default=dict, blank=True)
    decision = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True, help_text="Who changed replicas by hand; empty for a policy")

    class Meta:
        ordering = ["deployment_id", "at", "id"]
        indexes = [models.Index(fields=["deployment", "at"], name="scalingevent_deployment_at")]

    def __str__(self) -> str:
        return f"{self.deployment} {self.action} {self.replicas_before}->{self.replicas_after} ({self.outcome})"


class CorrectionFactor(models.Model):
    """Measured / predicted throughput of a model on a GPU model and sharing mode (the feedback's
    correction factor; ``scheduler.core.feedback``)."""

    model = models.CharField(max_length=200)
    gpu_model = models.CharField(max_length=64)
    sharing_mode = models.CharField(max_length=16)
    factor = models.FloatField()
    observations = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "gpu_model", "sharing_mode"],
                                               name="correction_factor_unique")]

    def __str__(self) -> str:
        return f"{self.model} on {self.gpu_model} ({self.sharing_mode}): x{self.factor:.3f}"


class LearnedWeights(models.Model):
    """The learned score weights of a profile (bounded around the profile's defaults), or its
    defaults while none were learned; ``frozen`` stops learning."""

    profile = models.CharField(max_length=64, unique=True)
    weights = models.JSONField(default=dict, blank=True)
    frozen = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"learned weights of {self.profile}"
