"""The audit trail: one row per change of state, by whom or what, and why.

Objects are named by ``object_type`` ("app_label.model", e.g. "scheduler.deployment") and
``object_id`` (the primary key or natural key as text) rather than by a foreign key, so any app can
record events about any object without depending on the others, and events outlive the objects
they describe (a deleted deployment keeps its history).
"""
from __future__ import annotations

from django.db import models


class AuditEvent(models.Model):
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(
        max_length=150, help_text='Username, or "system:<component>" for gpuplane\'s own workers'
    )
    verb = models.CharField(max_length=64, help_text='What happened, e.g. "deployment.created", "node.updated"')
    object_type = models.CharField(max_length=64, help_text='"app_label.model", e.g. "nodes.node"')
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=200, blank=True, help_text="How the object read when it happened")
    reason = models.TextField(blank=True)
    before = models.JSONField(null=True, blank=True, help_text="The changed fields before, when it matters")
    after = models.JSONField(null=True, blank=True, help_text="The changed fields after, when it matters")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id", "-at"], name="auditevent_object_at"),
            models.Index(fields=["verb", "-at"], name="auditevent_verb_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.verb} {self.object_type}:{self.object_id}"
