"""A rollout as rows: one ``RollingUpdate`` and a ``RolloutNode`` per target node.

Both are persisted state machines (docs/design.md section 5): their ``status``/``state`` change only
through ``ROLLOUT_STATES`` and ``NODE_STATES`` (``lifecycle.transitions.StateMachine``: a
conditional UPDATE and an audit event, ``rollingupdate.<status>`` / ``rolloutnode.<state>``), so
a racing user and reconciler cannot both move the same row, and the reconciler that drives them
can crash and resume anywhere.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from lifecycle.transitions import StateMachine
from rollouts.choices import (
    DONE_NODE_STATES,
    FINAL_STATUSES,
    NODE_FROM,
    ROLLOUT_FROM,
    NodeState,
    OnFailure,
    RolloutStatus,
    RolloutStrategy,
)


class RollingUpdate(models.Model):
    name = models.CharField(max_length=63)
    config = models.JSONField(help_text="Target sharing config: {mode, replicas, mig_layout}")
    strategy = models.CharField(max_length=16, choices=RolloutStrategy.choices, default=RolloutStrategy.ROLLING)
    max_unavailable = models.PositiveSmallIntegerField(default=1)
    on_failure = models.CharField(max_length=16, choices=OnFailure.choices, default=OnFailure.PAUSE)
    maintenance_window = models.JSONField(
        null=True, blank=True,
        help_text="When a node's change may start: {cron, duration_minutes, timezone} (rollouts.windows); null: any time")
    move_back = models.BooleanField(default=False, help_text="Move the workloads back onto each node once it is proven")
    status = models.CharField(max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.PENDING)
    message = models.TextField(blank=True, help_text="Why it paused or failed, or the latest status change")
    plan = models.JSONField(default=dict, blank=True, help_text="The preview it was created from")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    start_by = models.DateTimeField(
        null=True, blank=True,
        help_text="A pending rollout not started by then expires and releases its nodes (GPUPLANE_ROLLOUT_START_DEADLINE_S)")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status"])]

    def __str__(self) -> str:
        return f"rollout {self.name} ({self.status})"

    @property
    def progress_percent(self) -> float:
        """Share of the target nodes that are done (changed, skipped with a reason, or rolled back)."""
        states = [node.state for node in self.nodes.all()]
        if not states:
            return 0.0
        return round(100.0 * sum(state in DONE_NODE_STATES for state in states) / len(states), 1)


class RolloutNode(models.Model):
    """One target node of a rollout. ``node_name`` stays when the node row goes (inventory sync)."""

    rollout = models.ForeignKey(RollingUpdate, on_delete=models.CASCADE, related_name="nodes")
    node = models.ForeignKey("nodes.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="rollout_steps")
    node_name = models.CharField(max_length=253)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.PENDING)
    batch_index = models.PositiveSmallIntegerField(null=True, blank=True, help_text="1-based; null when skipped")
    previous_config = models.JSONField(null=True, blank=True, help_text="Its applied config before, for rollback")
    reason = models.TextField(blank=True)
    # The reconciler's bookkeeping, persisted so that a crashed step resumes where it stopped.
    step_started_at = models.DateTimeField(null=True, blank=True, help_text="When the current step began (timeouts)")
    retry_at = models.DateTimeField(null=True, blank=True, help_text="Not before: an eviction answered 429")
    progress = models.JSONField(default=dict, blank=True, help_text="Step work done: replicas pre-warmed, labels set")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rollout_id", "batch_index", "node_name"]
        constraints = [models.UniqueConstraint(fields=["rollout", "node_name"], name="rollout_node_once")]

    def __str__(self) -> str:
        return f"{self.node_name} in rollout {self.rollout_id} ({self.state})"


ROLLOUT_STATES = StateMachine(RollingUpdate, ROLLOUT_FROM, note_field="message", final=FINAL_STATUSES,
                              finished_field="finished_at", started=(RolloutStatus.RUNNING,), started_field="started_at")
NODE_STATES = StateMachine(RolloutNode, NODE_FROM, field="state")
