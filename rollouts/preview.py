"""The dry run of a rollout: the cluster as it is now, fed to the pure planner and the placement engine.

``cluster_for_planning`` reads every node once (its config, capacity, and the gpuplane replicas
on it); ``preview`` runs ``scheduler.core.rollout.plan_rollout`` on it for the batches and the
capacity dip, then asks the placement engine where each workload that must move would be
pre-warmed (``rollouts.placement_dry_run``: the deploy path's profile, snapshot and decisions,
in the reconciler's order, nothing written), and reads the target nodes' pods from the cluster
for those that will block a drain (``rollouts.drain_blockers``). It gives the plan plus what
blocks starting now (``blockers``: workloads the engine places nowhere, nodes another rollout
owns, nothing to change, other teams' pods the drain would leave with nowhere to run,
``rollouts.evicted_pods``; configs the GPU operator's ConfigMaps lack and that cannot be written,
``rollouts.configs``). Nothing is written: the configs are checked with a dry run of the write.

Capacity (the dip) is counted in milli-GPUs as in the planner. A node offers its GPUs minus what
pods gpuplane did not place hold (inventory sync's counters), so foreign pods are never counted
as free room. Where a moved workload goes is the placement engine's answer (``PLACER``): GPU
model, memory, MIG geometry, host resources, quotas, as when the rollout runs. A target node
with a do-not-disrupt or bare pod stays in its batch, marked to be skipped with the reason (the
step skips it at its turn unless the pod has left): it blocks that node, not the rollout.
Blue-green changes every target at once, after moving every workload to nodes outside the pool.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT
from nodes.models import Node
from nodes.node_configs import applied_config, with_mig_layouts
from nodes.operator_configs import ConfigReport
from nodes.sharing.node_config import NodeConfig
from nodes.vocabulary import SHARE_MILLI_FULL
from rollouts import configs as rollout_configs
from rollouts.choices import ACTIVE_STATUSES, RolloutStrategy
from rollouts.drain_blockers import DrainBlocker, drain_blockers, drained_pods, skip_reason
from rollouts.evicted_pods import rebinding_problems
from rollouts.models import RolloutNode
from rollouts.placement_dry_run import ACTIVE_PLACEMENTS, EngineMove, place_moves, workload_key
from scheduler.core import rollout as planner
from scheduler.core.maintenance_window import MaintenanceWindow, window_state
from scheduler.models import Placement

PLACER = ("the placement engine (the deploy path's profile and filters, dry run in the order the rollout "
          "pre-warms; nothing reserved)")


@dataclass(frozen=True)
class Preview:
    plan: planner.RolloutPlan
    strategy: str
    blockers: tuple[str, ...]
    maintenance_window: MaintenanceWindow | None = None
    move_back: bool = False
    moves: tuple[EngineMove, ...] = ()
    drain_blockers: Mapping[str, tuple[DrainBlocker, ...]] = field(default_factory=dict)
    pods_unread: str = ""
    configs: ConfigReport = field(default_factory=ConfigReport)

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
            "batches": [_batch(batch, self.moves) for batch in plan.batches],
            "skipped": [{"node": s.node, "reason": s.reason} for s in plan.skipped],
            "refusals": [{"workload": m.workload, "node": m.source, "reason": m.reason}
                         for m in self.moves if m.refused],
            "drain_blockers": [{"node": node, "reason": skip_reason(list(pods), SKIP_OUTCOME),
                                "pods": [p.as_dict() for p in pods]} for node, pods in self.drain_blockers.items()],
            "pods_unread": self.pods_unread,
            "configs": self.configs.as_dict(),
            "explanation": self.explain(),
        }

    def explain(self) -> list[str]:
        """The plan in sentences: the planner's batches and dip, the engine's moves, nodes to be skipped."""
        plan = self.plan
        lines = [f"{s.node}: skipped, {s.reason}" for s in plan.skipped]
        if self.configs.to_write:
            lines.append(f"written into the GPU operator's ConfigMaps before any node is cordoned: "
                         f"{', '.join(self.configs.to_write)}")
        for batch in plan.batches:
            lines.append(f"batch {batch.index}: {', '.join(batch.nodes)} ({batch.capacity_dip_milli / 1000:g} GPU "
                         f"out of service, {batch.capacity_dip_percent:.1f} % of capacity)")
            lines.extend(f"  {name}: to be skipped at its turn, {skip_reason(list(self.drain_blockers[name]), SKIP_OUTCOME)}"
                         for name in batch.nodes if name in self.drain_blockers)
            for move in self.moves:
                if move.source not in batch.nodes:
                    continue
                if move.refused:
                    lines.append(f"  {move.workload} on {move.source} cannot move: {move.reason}")
                elif move.destination:
                    gpus = ", ".join(str(gpu) for gpu in move.gpus)
                    lines.append(f"  {move.workload} moves from {move.source} to {move.destination} ({move.partition} "
                                 f"on GPU {gpus}) before {move.source} is drained")
                else:
                    lines.append(f"  {move.workload} on {move.source}: {move.reason}")
        return lines


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
        found[placement.node.name].append(planner.RolloutWorkload(
            key=workload_key(placement),
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
            maintenance_window: MaintenanceWindow | None = None, move_back: bool = False,
            cluster: ClusterBackend | None = None) -> Preview:
    """Plan changing ``node_names`` (known nodes, validated by the caller) to ``config``; ``rollout_id``:
    the stored rollout being re-checked (its own nodes are not "owned elsewhere"). A closed
    ``maintenance_window`` blocks nothing: the rollout waits for it (shown with the plan).
    ``cluster``: where the target nodes' pods are read (default: the configured backend)."""
    # Blue-green drains the whole pool in one step, once its workloads run outside it.
    width = max(1, len(node_names)) if strategy == RolloutStrategy.BLUE_GREEN else max_unavailable
    plan = planner.plan_rollout(cluster_for_planning(), node_names, config, width)
    if strategy == RolloutStrategy.BLUE_GREEN:
        plan = planner.RolloutPlan(plan.target, max_unavailable, plan.batches, plan.skipped, plan.refusals)
    in_batches = [name for batch in plan.batches for name in batch.nodes]
    backend = cluster if cluster is not None else get_cluster()
    batches = [batch.nodes for batch in plan.batches]
    blocked, unread, rebinding = _read_pods(batches, config, backend)
    moves = place_moves(batches, config, skipped_at_turn=set(blocked))
    blockers = [f"{m.workload} on {m.source} cannot move: {m.reason}" for m in moves if m.refused]
    blockers.extend(rebinding)
    for name, owner in sorted(owned_elsewhere(node_names, exclude=rollout_id).items()):
        blockers.append(f"{name} is already in active rollout {owner}")
    if not plan.batches:
        blockers.append("no target node needs changing (each is skipped, see skipped)")
    configs = ConfigReport()
    if in_batches:
        configs = rollout_configs.check(with_mig_layouts(Node.objects.filter(name__in=in_batches)), config, backend)
        blockers.extend(configs.problems)
    return Preview(plan, str(strategy), tuple(blockers), maintenance_window, move_back, tuple(moves), blocked,
                   unread, configs)


SKIP_OUTCOME = "nothing on it will be changed"


def _read_pods(batches: Sequence[Sequence[str]], target: NodeConfig,
               cluster: ClusterBackend) -> tuple[dict[str, tuple[DrainBlocker, ...]], str, list[str]]:
    """Per target node, the pods that will block its drain (none listed: nothing blocks it); why
    the pods could not be read ("" when they were): the steps check again at each node's turn; and
    what keeps other teams' evicted pods from running again (``rollouts.evicted_pods``)."""
    node_names = [name for batch in batches for name in batch]
    if not node_names:
        return {}, "", []
    try:
        pods = cluster.list_gpu_pods()
        nodes = cluster.list_nodes()
    except ClusterError as error:
        return {}, f"the cluster's pods could not be read ({error}); each node's drain is checked at its turn", []
    found = {name: tuple(drain_blockers(drained_pods(pods, name))) for name in sorted(node_names)}
    blocked = {name: blockers for name, blockers in found.items() if blockers}
    return blocked, "", rebinding_problems(pods, nodes, batches, target, skipped_at_turn=set(blocked))


def _window(window: MaintenanceWindow | None) -> dict[str, Any] | None:
    """The window with its state now: open (until when) or when it next opens, in its zone."""
    if window is None:
        return None
    state = window_state(window, timezone.now())
    return {**window.as_dict(), "open_now": state.open,
            "closes_at": state.closes_at.isoformat() if state.closes_at else None,
            "next_opens_at": state.next_opens_at.isoformat() if state.next_opens_at else None}


def _batch(batch: planner.Batch, moves: Sequence[EngineMove]) -> dict[str, Any]:
    return {
        "index": batch.index,
        "nodes": list(batch.nodes),
        "capacity_dip_milli": batch.capacity_dip_milli,
        "total_capacity_milli": batch.total_capacity_milli,
        "capacity_dip_percent": round(batch.capacity_dip_percent, 1),
        "moves": [m.as_dict() for m in moves if m.source in batch.nodes],
    }
