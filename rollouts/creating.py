"""Creating a rollout: validate the request against the nodes it names, preview it, store it.

``validate_request`` raises ``InvalidRollout`` (a 400: messages per field, the config's from
NVIDIA's rules or the MIG planner for each named node's GPU model); ``create_rollout`` raises
``RolloutRefused`` (a 409) when the preview shows it cannot be done safely now. A stored rollout
is ``pending`` with one ``RolloutNode`` per target: ``skipped`` with the planner's reason, or
``pending`` in its batch. Starting it is the reconciler's job, not this module's; one not started
within ``ROLLOUT_START_DEADLINE_S`` (its ``start_by``) expires and releases its nodes
(``rollouts.expiry``).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from lifecycle.audit import record
from lifecycle.errors import Conflict, InvalidRequest
from nodes.cluster.base import ClusterBackend
from nodes.models import Node
from nodes.node_configs import applied_config, validate_for_node
from nodes.sharing.node_config import InvalidNodeConfig, NodeConfig
from rollouts.choices import NodeState, OnFailure, RolloutStatus, RolloutStrategy
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.preview import Preview, preview
from rollouts.windows import InvalidWindow, parse_window
from scheduler.core.maintenance_window import MaintenanceWindow

ROLLOUT_CREATED = "rollingupdate.created"


class InvalidRollout(InvalidRequest):
    """The request is invalid (400): ``errors`` are messages per field."""


class RolloutRefused(Conflict):
    """The preview shows the rollout cannot be done safely now (409); nothing was stored.

    The answer carries the reasons and the whole preview."""

    def __init__(self, preview: Preview) -> None:
        super().__init__("The rollout cannot be done safely now; nothing was stored.")
        self.preview = preview
        self.reasons = preview.blockers

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail, "reasons": list(self.preview.blockers), "preview": self.preview.as_dict()}


@dataclass(frozen=True)
class RolloutRequest:
    name: str
    nodes: tuple[str, ...]
    config: NodeConfig
    strategy: str = RolloutStrategy.ROLLING
    max_unavailable: int = 1
    on_failure: str = OnFailure.PAUSE
    maintenance_window: MaintenanceWindow | None = None
    move_back: bool = False

    def preview(self, cluster: ClusterBackend | None = None) -> Preview:
        """The dry run on ``cluster`` (default: the configured backend)."""
        return preview(self.nodes, self.config, strategy=self.strategy, max_unavailable=self.max_unavailable,
                       maintenance_window=self.maintenance_window, move_back=self.move_back, cluster=cluster)


def nodes_selected(selector: Mapping[str, str]) -> list[str]:
    """The names of the nodes carrying every label of ``selector`` (a nodeSelector), sorted."""
    return sorted(node.name for node in Node.objects.only("name", "labels").order_by("name")
                  if all(node.labels.get(key) == value for key, value in selector.items()))


def validate_request(name: str, node_names: Sequence[str], config: Any, *, strategy: str = RolloutStrategy.ROLLING,
                     max_unavailable: int = 1, on_failure: str = OnFailure.PAUSE,
                     maintenance_window: Mapping[str, Any] | None = None, move_back: bool = False) -> RolloutRequest:
    """The request as values, checked against the database: every node exists, and ``config``
    (the API shape) is valid for each node's GPU model; ``maintenance_window`` (``{cron,
    duration_minutes, timezone}``, None: any time) is a window ``rollouts.windows`` can read."""
    errors: dict[str, Any] = {}
    window: MaintenanceWindow | None = None
    if maintenance_window is not None:
        try:
            window = parse_window(maintenance_window)
        except InvalidWindow as error:
            errors["maintenance_window"] = error.errors
    if not node_names:
        errors["nodes"] = ["Name at least one node."]
    duplicates = sorted(name for name, count in Counter(node_names).items() if count > 1)
    if duplicates:
        errors["nodes"] = [f"Named more than once: {', '.join(duplicates)}."]
    nodes = {node.name: node for node in Node.objects.filter(name__in=list(node_names))}
    unknown = [n for n in node_names if n not in nodes]
    if unknown:
        errors.setdefault("nodes", []).append(f"Unknown node{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}.")
    parsed: NodeConfig | None = None
    # One check per GPU model: NVIDIA's limits (MPS clients, MIG geometry) depend on it.
    by_model: dict[str, list[Node]] = defaultdict(list)
    for node in nodes.values():
        by_model[node.gpu_model].append(node)
    config_errors: dict[str, list[str]] = defaultdict(list)
    for model, group in sorted(by_model.items()):
        try:
            parsed = validate_for_node(group[0], config)
        except InvalidNodeConfig as error:
            where = f"{model or 'unknown GPU model'} ({', '.join(sorted(n.name for n in group))})"
            for field, messages in error.field_errors().items():
                config_errors[field].extend(f"{where}: {message}" for message in messages)
    if config_errors:
        errors["config"] = dict(config_errors)
    if errors:
        raise InvalidRollout(errors)
    assert parsed is not None  # at least one node, all known: the loop ran
    return RolloutRequest(name, tuple(node_names), parsed, strategy, max_unavailable, on_failure, window, move_back)


def create_rollout(request: RolloutRequest, *, actor: Any = None, cluster: ClusterBackend | None = None) -> RollingUpdate:
    """Store ``request`` as a pending rollout, or raise ``RolloutRefused`` (nothing stored); the
    preview reads ``cluster`` (default: the configured backend)."""
    with transaction.atomic():
        # Locking the target nodes serialises two creations naming the same node, so both cannot
        # pass the "owned by another rollout" check.
        targets = {n.name: n for n in Node.objects.select_for_update().filter(name__in=request.nodes).order_by("pk")}
        shown = request.preview(cluster)
        if not shown.safe:
            raise RolloutRefused(shown)
        rollout = RollingUpdate.objects.create(
            name=request.name, config=request.config.as_dict(), strategy=request.strategy,
            max_unavailable=request.max_unavailable, on_failure=request.on_failure,
            maintenance_window=request.maintenance_window.as_dict() if request.maintenance_window else None,
            move_back=request.move_back,
            status=RolloutStatus.PENDING, plan=shown.as_dict(),
            start_by=timezone.now() + timedelta(seconds=settings.ROLLOUT_START_DEADLINE_S),
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        RolloutNode.objects.bulk_create(_rows(rollout, shown, targets))
        record(ROLLOUT_CREATED, rollout, actor=actor, reason=f"{request.name}: to {request.config.describe()}",
               after={"status": rollout.status, "nodes": sorted(request.nodes), "config": rollout.config})
    return rollout


def _rows(rollout: RollingUpdate, shown: Preview, targets: dict[str, Node]) -> list[RolloutNode]:
    rows = []
    for skipped in shown.plan.skipped:
        node = targets[skipped.node]
        rows.append(RolloutNode(rollout=rollout, node=node, node_name=node.name, state=NodeState.SKIPPED,
                                reason=skipped.reason, previous_config=applied_config(node).as_dict()))
    for batch in shown.plan.batches:
        for name in batch.nodes:
            node = targets[name]
            rows.append(RolloutNode(rollout=rollout, node=node, node_name=name, state=NodeState.PENDING,
                                    batch_index=batch.index, previous_config=applied_config(node).as_dict()))
    return rows
