"""What sharing saved over time: one sample of the cluster's savings per interval (docs/design.md section 6).

GPU-hours, dollars and energy saved over a window are integrated from these samples
(scheduler.core.savings.integrate_samples); samples older than settings.SAVINGS_RETENTION_D
are deleted by the task that records them.
"""
from __future__ import annotations

from django.db import models
from django.db.models import Q


class SavingsSample(models.Model):
    """The savings against the whole-GPU baseline at `ts`, as GET /api/v1/savings/ computed them."""

    ts = models.DateTimeField(unique=True)
    baseline_gpus = models.PositiveIntegerField(help_text="GPUs every GPU-requesting workload would take on whole GPUs")
    gpus_used = models.PositiveIntegerField(help_text="GPUs holding anything")
    gpus_saved = models.IntegerField(help_text="baseline_gpus - gpus_used")
    usd_per_hour = models.FloatField(help_text="Price of the GPUs saved, per hour")
    kwh_per_hour = models.FloatField(help_text="Board power of the GPUs saved, in kWh per hour")

    class Meta:
        ordering = ["ts"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus_saved__gte=0), name="savingssample_gpus_saved_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.gpus_saved} GPUs saved @{self.ts:%Y-%m-%dT%H:%M:%S}"
