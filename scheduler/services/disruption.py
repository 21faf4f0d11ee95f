"""Disruption budgets that span every source of moves (docs/design.md section 5a).

The mover asks ``start_blocker`` before a move places its replacement and ``evict_blocker``
before it evicts the original; each returns "" when the move may go on, else why it waits:

- **do-not-disrupt**: the original's pod, or its node, is annotated (or labelled)
  ``gpuplane.io/do-not-disrupt=true`` (``nodes.cluster.disruption``);
- **concurrent disruptions**: at most ``DISRUPTION_BUDGET`` nodes (a count, or a percentage of
  the GPU nodes rounded up; at least 1) have moves off them under way at once, whoever asked,
  as Karpenter's ``nodes: 10%`` budget; a move off a node already being disrupted adds nothing.
  A held move (a rollout's pre-warm: its rollout paces its nodes) counts once it is let go, and
  an eviction waits while other nodes are being evicted from beyond the budget;
- **minimum interval**: a workload is disrupted by one operation at a time, and not again by
  another within ``DISRUPTION_MIN_INTERVAL_S`` of its last eviction (the moves of one operation,
  say a node's drain, are one disruption; its PodDisruptionBudget still paces them).

A removal (no replacement) is checked once, before it evicts (``evict_blocker``), against the
stricter count of the two (every node with a move under way), since it disrupts at once. A
scale-down's removal neither waits on the minimum interval nor counts towards it: the workload's
owner (a PATCH, its autoscaler, whose own 300 s down window paces it) asked for one replica
less, which is no disruption of the workload against its will; PodDisruptionBudgets, the
do-not-disrupt mark and the concurrent budget hold it like any other. A preemption's removal is
such a disruption: it waits, and counts, as a move does.

PodDisruptionBudgets themselves are the API server's to enforce (an eviction answers 429);
``pdb_reason`` says which budget answered so, for the move's blocked reason.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings

from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPod
from nodes.cluster.disruption import budget_of, node_do_not_disrupt, pod_do_not_disrupt, selects
from nodes.contract import LABEL_APP_NAME
from nodes.models import Node
from scheduler.choices import MOVE_DISRUPTING, MOVE_IN_FLIGHT, MoveKind, MoveRequester, MoveStatus
from scheduler.models import Move


def concurrent_budget() -> int:
    """How many nodes may be disrupted at once (``DISRUPTION_BUDGET`` of the GPU nodes, at least 1)."""
    value = settings.DISRUPTION_BUDGET
    if value.endswith("%"):
        gpu_nodes = Node.objects.filter(gpu_count__gt=0).count()
        return max(1, math.ceil(gpu_nodes * int(value[:-1]) / 100))
    return max(1, int(value))


def original_pods(move: Move, pods: list[ClusterPod]) -> list[ClusterPod]:
    """The pods of the original's workload on the node it leaves (any of them is the replica); on
    any node for a removal of a replica handed to the default scheduler (no node of gpuplane's)."""
    workload = move.original.workload_name
    return [p for p in pods if p.namespace == move.deployment.namespace
            and (p.node_name == move.from_node or not move.from_node)
            and workload and p.labels.get(LABEL_APP_NAME) == workload]


def _do_not_disrupt(move: Move, cluster: ClusterBackend) -> str:
    node = next((n for n in cluster.list_nodes() if n.name == move.from_node), None)
    if node is not None and node_do_not_disrupt(node):
        return f"node {move.from_node} is marked gpuplane.io/do-not-disrupt"
    marked = [p.key for p in original_pods(move, cluster.list_gpu_pods()) if pod_do_not_disrupt(p)]
    if marked:
        return f"pod {', '.join(marked)} is marked gpuplane.io/do-not-disrupt"
    return ""


def _concurrency(move: Move, *, evicting: bool) -> str:
    # Placing: the nodes with moves under way that nobody holds (a held move disrupts nothing until
    # its requester, whose own pacing holds it, lets it go). Evicting: the nodes being evicted from
    # now, which finish without waiting on anyone, so two moves never wait on each other.
    moves = (Move.objects.filter(status=MoveStatus.ORIGINAL_EVICTING) if evicting
             else Move.objects.filter(status__in=MOVE_DISRUPTING, hold=False))
    busy = set(moves.exclude(pk=move.pk).values_list("from_node", flat=True))
    budget = concurrent_budget()
    if move.from_node in busy or len(busy) < budget:
        return ""
    return (f"the disruption budget allows {budget} node(s) disrupted at once "
            f"({settings.DISRUPTION_BUDGET} of GPU nodes); in flight: {', '.join(sorted(busy))}")


def asked_for(move: Move) -> bool:
    """A scale-down's removal: the workload's owner asked for it (no minimum interval either way)."""
    return move.kind == MoveKind.REMOVAL and move.requested_by == MoveRequester.SCALE_DOWN


def _interval(move: Move, now: datetime) -> str:
    if asked_for(move):
        return ""
    others = (Move.objects.filter(deployment_id=move.deployment_id).exclude(requester=move.requester)
              .exclude(kind=MoveKind.REMOVAL, requested_by=MoveRequester.SCALE_DOWN))
    busy = others.filter(status__in=MOVE_IN_FLIGHT).exclude(status="planned").first()
    if busy is not None:
        return f"{move.deployment} is being disrupted by {busy.requester} (move {busy.pk})"
    last = others.filter(evicted_at__isnull=False).order_by("-evicted_at").first()
    interval = timedelta(seconds=settings.DISRUPTION_MIN_INTERVAL_S)
    if last is not None and last.evicted_at is not None and now - last.evicted_at < interval:
        return (f"{move.deployment} was disrupted at {last.evicted_at:%H:%M:%S} (move {last.pk}); "
                f"the minimum interval is {settings.DISRUPTION_MIN_INTERVAL_S} s")
    return ""


def start_blocker(move: Move, cluster: ClusterBackend, now: datetime) -> str:
    """Why ``move`` may not place its replacement now ("" when it may). ClusterError propagates."""
    return _do_not_disrupt(move, cluster) or _interval(move, now) or _concurrency(move, evicting=False)


def evict_blocker(move: Move, cluster: ClusterBackend, now: datetime) -> str:
    """Why ``move`` may not evict its original now ("" when it may). ClusterError propagates."""
    removal = move.kind == MoveKind.REMOVAL  # it evicts at once: the stricter count
    return _do_not_disrupt(move, cluster) or _interval(move, now) or _concurrency(move, evicting=not removal)


def pdb_reason(pod: ClusterPod, cluster: ClusterBackend, answer: str) -> str:
    """The blocked reason for an eviction of ``pod`` the API server refused with 429 (``answer``):
    the budget(s) that select it, as the disruption controller counts them."""
    try:
        pdbs = [pdb for pdb in cluster.list_pdbs() if selects(pdb, pod.namespace, pod.labels)]
        pods = cluster.list_gpu_pods() if pdbs else []
    except ClusterError:
        pdbs, pods = [], []
    described = "; ".join(budget_of(pdb, pods)[1] for pdb in pdbs) or "a PodDisruptionBudget"
    return f"eviction of {pod.key} refused (429) by {described}: {answer}"
