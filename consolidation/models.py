"""A consolidation plan as one row: its moves (JSON), what it frees and saves, and what it relies on.

``status`` changes only through ``PLAN_STATES`` (``lifecycle.transitions.StateMachine``: a
conditional UPDATE and an audit event ``consolidationplan.<status>``), so an admin and the
executor racing on a plan cannot both move it. ``fingerprint`` is what the cluster looked like, for
each node the plan touches, when the plan was made; execution compares it with the cluster then
and aborts untouched when they differ.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from consolidation.choices import FINAL_STATUSES, PLAN_FROM, PlanStatus
from lifecycle.transitions import StateMachine


def no_disruption() -> dict[str, object]:
    return {"workloads_moved": 0, "pdb_budget_used": {}}


class ConsolidationPlan(models.Model):
    status = models.CharField(max_length=16, choices=PlanStatus.choices, default=PlanStatus.PROPOSED)
    moves = models.JSONField(default=list, blank=True, help_text="[{workload, placement, deployment, from_node, "
                             "from_gpus, to_node, to_gpus, mig_profile, why}]")
    nodes_freed = models.JSONField(default=list, blank=True, help_text="Names of the nodes it empties")
    gpus_freed = models.PositiveIntegerField(default=0)
    savings_usd_per_hour = models.FloatField(default=0.0)
    savings_kwh_per_hour = models.FloatField(default=0.0)
    disruption = models.JSONField(default=no_disruption, blank=True, help_text="{workloads_moved, pdb_budget_used}")
    method = models.TextField(blank=True, help_text="How the plan was computed")
    skipped = models.JSONField(default=list, blank=True, help_text="Nodes left as they are, and why")
    fingerprint = models.JSONField(default=dict, blank=True, help_text="Per node it touches: the state it relies on")
    progress = models.JSONField(default=dict, blank=True, help_text="Execution bookkeeping per move")
    reason = models.TextField(blank=True, help_text="Why it was rejected, aborted, or the latest status change")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", help_text="The admin who approved or rejected it")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField(help_text="A proposed plan not approved by then expires")
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]

    def __str__(self) -> str:
        return f"consolidation plan {self.pk} ({self.status})"


PLAN_STATES = StateMachine(ConsolidationPlan, PLAN_FROM, final=FINAL_STATUSES, finished_field="finished_at")
