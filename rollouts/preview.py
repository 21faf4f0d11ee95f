"""The dry run of a rollout: the cluster as it is now, fed to the pure planner.

``cluster_for_planning`` reads every node once (its config, capacity, and the gpuplane replicas
on it); ``preview`` runs ``scheduler.core.rollout.plan_rollout`` on it and gives the plan plus
what blocks starting now (``blockers``: workloads with nowhere to go, nodes another rollout owns,
nothing to change). Nothing is written.

Capacity is counted in milli-GPUs as in the planner. A node offers its GPUs minus what pods
gpuplane did not place hold (inventory sync's counters), so foreign pods are never counted as
free room. Where a moved workload goes is the planner's best fit on free milli-GPUs
(``PLACER``); the placement engine (GPU model, memory, MIG geometry) is not consulted yet.
Blue-green changes every target at once, after moving every workload to nodes outside the pool.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from nodes.contract import ANNOTATION_DO_NOT_DISRUPT
from nodes.models import Node
from nodes.node_configs import applied_config, with_mig_layouts
from nodes.sharing.node_config import NodeConfig
from nodes.vocabulary import SHARE_MILLI_FULL
from rollouts.choices import ACTIVE_STATUSES, RolloutStrategy
from rollouts.models import RolloutNode
from scheduler.choices import PlacementStatus
from scheduler.core import rollout as planner
from scheduler.core.maintenance_window import MaintenanceWindow, window_state
from scheduler.models import Placement

PLACER = "best fit on free milli-GPUs (the rollout planner's default; the placement engine is not consulted)"
ACTIVE_PLACEMENTS = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


@dataclass(frozen=True)
class Preview:
    plan: planner.RolloutPlan
    strategy: str
    blockers: tuple[str, ...]
    maintenance_window: MaintenanceWindow | None = None
    move_back: bool = False

    @property
    def safe(self) -> bool:
        return not self.blockers

    def as_dict(self) -> dict[str, Any]:
        plan = self.plan
        target = plan.target.as_dict() if isinstance(plan.target, NodeConfig) else plan.target
        return {
            "config": target,
            "strategy": self.strategy,
            "max_unavailable": plan.max_unavailable,
            "maintenance_window": _window(self.maintenance_window),
            "move_back": self.move_back,
            "placer": PLACER,
            "feasible": self.safe,
            "blockers": list(self.blockers),
            "batches": [_batch(batch) for batch in plan.batches],
            "skipped": [{"node": s.node, "reason": s.reason} for s in plan.skipped],
            "refusals": [_refusal(r) for r in plan.refusals],
            "explanation": plan.explain(),
        }


def workloads_by_node() -> dict[str, list[planner.RolloutWorkload]]:
    """The gpuplane replicas holding capacity on each node (DaemonSet pods are never placements)."""
    found: dict[str, list[planner.RolloutWorkload]] = defaultdict(list)
    placements = (
        Placement.objects.filter(status__in=ACTIVE_PLACEMENTS, node__isnull=False)
        .select_related("deployment", "node")
        .order_by("pk")
    )
    for placement in placements:
        deployment = placement.deployment
        name = placement.workload_name or f"{deployment.name}-{deployment.pk}-r{placement.replica_index}"
        found[placement.node.name].append(planner.RolloutWorkload(
            key=f"{deployment.namespace}/{name}",
            size_milli=placement.share_milli * max(1, len(placement.gpu_indexes or ())),
            do_not_disrupt=str(deployment.labels.get(ANNOTATION_DO_NOT_DISRUPT, "")).lower() == "true",
        ))
    return found


def cluster_for_planning() -> list[planner.RolloutNode]:
    """Every node as the planner sees it (see the module docstring)."""
    workloads = workloads_by_node()
    nodes = with_mig_layouts(Node.objects.annotate(allocated=Sum("gpus__allocated_milli")).order_by("name"))
    cluster = []
    for node in nodes:
        mine = tuple(workloads.get(node.name, ()))
        foreign = max(0, (node.allocated or 0) - sum(w.size_milli for w in mine))
        cluster.append(planner.RolloutNode(
            name=node.name,
            config=applied_config(node),
            capacity_milli=max(0, node.gpu_count * SHARE_MILLI_FULL - foreign),
            workloads=mine,
            schedulable=node.ready and not node.cordoned,
        ))
    return cluster


def owned_elsewhere(node_names: Sequence[str], *, exclude: int | None = None) -> dict[str, int]:
    """Target nodes that an active rollout (other than ``exclude``) already owns: node name -> that rollout's id."""
    rows = RolloutNode.objects.filter(node_name__in=list(node_names), rollout__status__in=ACTIVE_STATUSES)
    if exclude is not None:
        rows = rows.exclude(rollout_id=exclude)
    return dict(rows.values_list("node_name", "rollout_id"))


def preview(node_names: Sequence[str], config: NodeConfig, *, strategy: str = RolloutStrategy.ROLLING,
            max_unavailable: int = 1, rollout_id: int | None = None,
            maintenance_window: MaintenanceWindow | None = None, move_back: bool = False) -> Preview:
    """Plan changing ``node_names`` (known nodes, validated by the caller) to ``config``; ``rollout_id``:
    the stored rollout being re-checked (its own nodes are not "owned elsewhere"). A closed
    ``maintenance_window`` blocks nothing: the rollout waits for it (shown with the plan)."""
    # Blue-green drains the whole pool in one step, once its workloads run outside it.
    width = max(1, len(node_names)) if strategy == RolloutStrategy.BLUE_GREEN else max_unavailable
    plan = planner.plan_rollout(cluster_for_planning(), node_names, config, width)
    if strategy == RolloutStrategy.BLUE_GREEN:
        plan = planner.RolloutPlan(plan.target, max_unavailable, plan.batches, plan.skipped, plan.refusals)
    blockers = [f"{r.workload} on {r.node} cannot move: {r.reason}" for r in plan.refusals]
    for name, owner in sorted(owned_elsewhere(node_names, exclude=rollout_id).items()):
        blockers.append(f"{name} is already in active rollout {owner}")
    if not plan.batches:
        blockers.append("no target node needs changing (each is skipped, see skipped)")
    return Preview(plan, str(strategy), tuple(blockers), maintenance_window, move_back)


def _batch(batch: planner.Batch) -> dict[str, Any]:
    return {
        "index": batch.index,
        "nodes": list(batch.nodes),
        "capacity_dip_milli": batch.capacity_dip_milli,
        "total_capacity_milli": batch.total_capacity_milli,
        "capacity_dip_percent": round(batch.capacity_dip_percent, 1),
        "moves": [
            {"workload": m.workload, "size_milli": m.size_milli, "source": m.source, "destination": m.destination}
            for step in batch.steps for m in step.moves
        ],
    }


def _window(window: MaintenanceWindow | None) -> dict[str, Any] | None:
    """The window with its state now: open (until when) or when it next opens, in its zone."""
    if window is None:
        return None
    state = window_state(window, timezone.now())
    return {**window.as_dict(), "open_now": state.open,
            "closes_at": state.closes_at.isoformat() if state.closes_at else None,
            "next_opens_at": state.next_opens_at.isoformat() if state.next_opens_at else None}


def _refusal(refusal: planner.Refusal) -> dict[str, str]:
    return {"workload": refusal.workload, "node": refusal.node, "reason": refusal.reason}
