"""Preemption: when a request cannot fit, which lower-priority placements would make room, and
(when an admin turned it on) evicting them and placing the request.

``preemption_for(spec)`` builds the planner's inputs from the inventory (every active placement
of lower priority on a node whose mode can give the request what it asks for, each with its
PriorityLevel value, its admission time and why the budgets keep it, if they do: a
PodDisruptionBudget with no disruption left, the do-not-disrupt mark on its pod or node, a move
of it in flight, or its workload disrupted by another operation within the minimum interval)
and the oracle "does the request fit on this node without these placements" from the placement
engine itself; ``scheduler.core.preemption.plan_preemption`` chooses among the others.

``carry_out`` is the one function that executes a plan, through the mover: first the victims
together are checked against the PodDisruptionBudgets (two victims under one budget that allows
one disruption: nothing is touched), then each is a removal (``moving.request_removal``,
requester ``preemption:<ns>/<name>``) advanced at once under the mover's lock: evicted through
the Eviction API, its placement released, its deployment told why. A removal the budgets hold
back (a 429, a budget reached meanwhile) stops the preemption cleanly: the removals not evicted
yet are given up and the request's 409 says why. With preemption off (the default), a refusal
says what preemption would have taken.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db.models import Sum
from django.utils import timezone

from lifecycle.audit import record
from lifecycle.errors import Conflict
from lifecycle.locks import tick_lock
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPDB, ClusterPod
from nodes.cluster.disruption import budget_of, node_do_not_disrupt, pod_do_not_disrupt, selects
from nodes.contract import LABEL_APP_NAME, LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from nodes.models import Node, Partition
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL, SharingMode
from scheduler.adapters import PLACEMENT_OCCUPANT, namespace_quota, read_nodes
from scheduler.choices import MOVE_IN_FLIGHT, DeploymentStatus, MoveKind, MoveRequester, MoveStatus, PlacementStatus
from scheduler.core import ClusterSnapshot, NodeState, Outcome, Priority, Scheduler, SharingRequest
from scheduler.core.preemption import Candidate, PreemptionPlan, plan_preemption
from scheduler.core.types import MODE_KINDS, REQUEST_KINDS
from scheduler.models import AdmissionSettings, Deployment, Move, Placement, PriorityLevel
from scheduler.services.deciding import placement_request, placement_scheduler
from scheduler.services.errors import NoCapacity
from scheduler.services.moving import MOVER_LOCK, advance_moves, cancel_move, request_removal
from scheduler.services.spec import DeploySpec
from scheduler.services.watching import fail_deployment

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Seed 002's values, where the PriorityLevel rows were removed.
DEFAULT_VALUES = {Priority.HIGH: 1000, Priority.MEDIUM: 500, Priority.LOW: 100}
ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)
MOVER_LOCK_TTL_S = 300  # where the lock is a cache entry (not PostgreSQL): longer than a preemption runs


def priority_values() -> dict[str, int]:
    """PriorityClass value of each priority (the admins' PriorityLevel rows, seed 002's by default)."""
    values: dict[str, int] = {str(p): v for p, v in DEFAULT_VALUES.items()}
    values.update(PriorityLevel.objects.values_list("priority", "value"))
    return values


def _blocked(deployment: Deployment, pdbs: list[ClusterPDB], live: int) -> str:
    """Why a PodDisruptionBudget forbids evicting one more pod of ``deployment`` ("" if none does)."""
    labels = {**(deployment.labels or {}), LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE, LABEL_DEPLOYMENT: str(deployment.pk)}
    for pdb in pdbs:
        if pdb.namespace != deployment.namespace or not pdb.match_labels:
            continue
        if any(labels.get(k) != v for k, v in pdb.match_labels.items()):
            continue
        if pdb.max_unavailable in (0, "0%"):
            return f"PodDisruptionBudget {pdb.key} allows no disruption (maxUnavailable 0)"
        minimum = pdb.min_available
        if isinstance(minimum, str) and minimum.endswith("%"):
            minimum = -(-int(minimum[:-1]) * live // 100)
        if isinstance(minimum, int) and live - 1 < minimum:
            return f"PodDisruptionBudget {pdb.key} needs {minimum} of {live} pods available"
    return ""


def _pod_of(placement: Placement, pods: list[ClusterPod], taken: set[str] | frozenset[str] = frozenset()) -> ClusterPod | None:
    """A pod of ``placement``'s workload on its node not in ``taken`` (each is one replica)."""
    node = placement.node.name if placement.node is not None else None
    return next((pod for pod in pods if pod.namespace == placement.deployment.namespace and pod.key not in taken
                 and placement.workload_name and pod.labels.get(LABEL_APP_NAME) == placement.workload_name
                 and (node is None or pod.node_name == node)), None)


def _marked(placements: list[Placement], cluster: ClusterBackend) -> dict[int, str]:
    """Placements the do-not-disrupt mark keeps (on their node or pod): why, by placement id."""
    marked_nodes = {n.name for n in cluster.list_nodes() if node_do_not_disrupt(n)}
    pods = cluster.list_gpu_pods()
    kept = {}
    for p in placements:
        pod = _pod_of(p, pods)
        if p.node is not None and p.node.name in marked_nodes:
            kept[p.pk] = f"node {p.node.name} is marked gpuplane.io/do-not-disrupt"
        elif pod is not None and pod_do_not_disrupt(pod):
            kept[p.pk] = f"pod {pod.key} is marked gpuplane.io/do-not-disrupt"
    return kept


def _kept_by_budgets(placements: list[Placement]) -> dict[int, str]:
    """Placements the mover's budgets keep now: one in a move, or of a workload another operation
    is disrupting or disrupted within ``DISRUPTION_MIN_INTERVAL_S``. Why, by placement id."""
    ids = {p.deployment_id for p in placements}
    moves = Move.objects.filter(deployment_id__in=ids).exclude(kind=MoveKind.REMOVAL,
                                                                requested_by=MoveRequester.SCALE_DOWN)
    since = timezone.now() - timedelta(seconds=settings.DISRUPTION_MIN_INTERVAL_S)
    moving = set(moves.filter(status__in=MOVE_IN_FLIGHT).values_list("original_id", flat=True))
    busy = {m.deployment_id: f"{m.kind} {m.pk} ({m.requester}) disrupts its workload now"
            for m in moves.filter(status__in=MOVE_IN_FLIGHT).exclude(status=MoveStatus.PLANNED)}
    recent = {m.deployment_id: f"its workload was disrupted at {m.evicted_at:%H:%M:%S} ({m.kind} {m.pk}); the "
              f"minimum interval is {settings.DISRUPTION_MIN_INTERVAL_S} s"
              for m in moves.filter(evicted_at__gte=since).order_by("evicted_at")}
    kept = {}
    for p in placements:
        why = (f"replica {p.replica_index} is being moved" if p.pk in moving else "") or busy.get(p.deployment_id) \
            or recent.get(p.deployment_id, "")
        if why:
            kept[p.pk] = why
    return kept


def _fits(states: Mapping[str, NodeState], spec: DeploySpec, scheduler: Scheduler):  # noqa: ANN202
    request = placement_request(spec, 0, None)

    def fits(node: str, removed: frozenset[str]) -> bool:
        snapshot = ClusterSnapshot([copy.deepcopy(states[node])])
        for key in removed:
            snapshot.release(node, key)
        return scheduler.schedule(request, snapshot, reserve=False).outcome == Outcome.PLACED
    return fits


def preemption_for(spec: DeploySpec, *, cluster: ClusterBackend | None = None) -> PreemptionPlan | None:
    """The plan that would place ``spec``'s replica by evicting lower-priority placements, or None."""
    values = priority_values()
    priority = values.get(str(spec.priority), 0)
    kinds = REQUEST_KINDS[SharingRequest(spec.sharing)]
    # MIG work never falls back to a non-MIG node (nor any work to a mode that cannot give its kind).
    modes = [mode for mode in SharingMode if MODE_KINDS[mode] & kinds]
    states, _ = read_nodes(Node.objects.filter(sharing_mode__in=modes).order_by("name"))
    by_name = {state.name: state for state in states}
    placements = list(Placement.objects.filter(
        status__in=ACTIVE, node__name__in=list(by_name),
        deployment__status__in=(DeploymentStatus.PLACED, DeploymentStatus.RUNNING),
    ).select_related("deployment", "node"))
    placements = [p for p in placements if values.get(p.deployment.priority, 0) < priority]
    if not placements:
        return None
    backend = cluster if cluster is not None else get_cluster()
    try:
        pdbs = backend.list_pdbs()
        kept_by_marks = _marked(placements, backend)
    except ClusterError:
        logger.warning("could not read PodDisruptionBudgets; no placement is a preemption candidate", exc_info=True)
        return None
    live: dict[int, int] = {}
    for p in placements:
        live[p.deployment_id] = live.get(p.deployment_id, 0) + 1
    kept = {**_kept_by_budgets(placements), **kept_by_marks}
    candidates = [
        Candidate(PLACEMENT_OCCUPANT.format(id=p.pk), p.node.name, values.get(p.deployment.priority, 0),
                  admitted=(p.deployment.placed_at or p.created_at).timestamp(),
                  blocked=_blocked(p.deployment, pdbs, live[p.deployment_id]) or kept.get(p.pk, ""))
        for p in placements
    ]
    return plan_preemption(priority, candidates, _fits(by_name, spec, placement_scheduler()))


def may_preempt_now(spec: DeploySpec) -> tuple[bool, str]:
    """Whether preemption may run for ``spec`` now: on, its priority preempts, and the delay since
    its first refusal has passed (an autoscaler may add room meanwhile); else why not."""
    admission = AdmissionSettings.current()
    if not admission.preemption_enabled:
        return False, "preemption is off"
    level = PriorityLevel.objects.filter(priority=spec.priority).first()
    if level is not None and not level.preempts:
        return False, f"priority {spec.priority} does not preempt"
    if admission.preemption_delay_s:
        key = f"gpuplane:preemption-wait:{spec.namespace}/{spec.name}"
        now = timezone.now().timestamp()
        cache.add(key, now, timeout=admission.preemption_delay_s * 4)
        waited = now - float(cache.get(key, now))
        if waited < admission.preemption_delay_s:
            return False, f"preemption waits {admission.preemption_delay_s} s (an autoscaler may add room); retry " \
                          f"in {admission.preemption_delay_s - waited:.0f} s"
    return True, ""


def _breaks_a_budget(victims: list[Placement], cluster: ClusterBackend) -> str:
    """Why evicting all of ``victims`` would break a PodDisruptionBudget ("" if none): each budget
    counted over the victims' ready pods it selects (a pod not ready ignores budgets, as in Kubernetes)."""
    pdbs = cluster.list_pdbs()
    pods = cluster.list_gpu_pods() if pdbs else []
    taken: set[str] = set()
    for victim in victims:
        pod = _pod_of(victim, pods, taken)
        if pod is not None:
            taken.add(pod.key)
    ready = [pod for pod in pods if pod.key in taken and pod.ready]
    for pdb in pdbs:
        count = sum(1 for pod in ready if selects(pdb, pod.namespace, pod.labels))
        allowed, described = budget_of(pdb, pods)
        if count > allowed:
            return f"evicting {count} of its pods at once would break {described}"
    return ""


def carry_out(plan: PreemptionPlan, *, by: str, user: Any = None, cluster: ClusterBackend | None = None) -> tuple[int, str]:
    """Evict ``plan``'s victims through the mover (see the module docstring): how many, and why it
    stopped ("" when every victim was evicted and released). Nothing is touched when it stops first."""
    backend = cluster if cluster is not None else get_cluster()
    ids = [int(v.key.split(":", 1)[1]) for v in plan.victims]
    victims = list(Placement.objects.select_related("deployment", "node").filter(pk__in=ids, status__in=ACTIVE))
    victims.sort(key=lambda p: ids.index(p.pk))
    requester = f"preemption:{by}"
    try:
        broken = _breaks_a_budget(victims, backend)
    except ClusterError as error:
        broken = f"the cluster failed: {error}"
    if broken:
        return 0, broken
    removals: list[Move] = []
    for placement in victims:
        reason = (f"preempted by {by} (priority {placement.deployment.priority} is below the request's): "
                  f"replica {placement.replica_index} on {plan.node} evicted to make room")
        try:
            removals.append(request_removal(placement, why=reason, requested_by=MoveRequester.PREEMPTION,
                                            requester=requester, actor=user))
        except Conflict as error:  # moved by another operation since the plan: stop before evicting
            _give_up(removals, backend, str(error))
            return 0, str(error)
    with tick_lock(MOVER_LOCK, ttl_s=MOVER_LOCK_TTL_S) as acquired:
        if not acquired:  # a mover tick runs now: try again rather than race it
            _give_up(removals, backend, "the mover was busy")
            return 0, "the mover is busy with another tick; try again in a moment"
        advance_moves(cluster=backend, requester=requester)
    stopped = ""
    evicted = 0
    for removal in removals:
        removal.refresh_from_db()
        if removal.status != MoveStatus.DONE:
            stopped = stopped or removal.blocked_reason or removal.reason
            continue
        evicted += 1
        _tell(removal)
    if stopped:
        _give_up(removals, backend, stopped)
    return evicted, stopped


def _give_up(removals: list[Move], cluster: ClusterBackend, reason: str) -> None:
    for removal in removals:
        cancel_move(removal, reason=f"the preemption stopped: {reason}", cluster=cluster)


def _tell(removal: Move) -> None:
    """The victim's deployment is told why (failed when nothing of it runs any more), audited."""
    placement = removal.original
    record("placement.preempted", placement, actor=removal.requester, reason=removal.why)
    if Placement.objects.filter(deployment_id=placement.deployment_id, status__in=ACTIVE).exists():
        Deployment.objects.filter(pk=placement.deployment_id).update(message=removal.why)
    else:
        fail_deployment(placement.deployment, removal.why)


def _over_quota(spec: DeploySpec, plan: PreemptionPlan) -> str:
    """Why the namespace's quota would refuse the request even after the plan ("" if it would not).

    Victims of the same namespace give their share back; the request is charged at most a whole
    GPU per GPU it asks for (its exact share is known only once placed), so a shared request
    near its quota may be refused a preemption that would just have fit."""
    quota = namespace_quota(spec.namespace)
    if quota is None:
        return ""
    ids = [int(v.key.split(":", 1)[1]) for v in plan.victims]
    mine = Placement.objects.filter(pk__in=ids, deployment__namespace=spec.namespace)
    freed_milli = Partition.objects.filter(hold__placement__in=mine).aggregate(total=Sum("share_milli"))["total"] or 0
    freed_memory = mine.aggregate(total=Sum("deployment__memory_mib"))["total"] or 0
    if quota.gpu_milli_limit is not None and (
            quota.gpu_milli_used - freed_milli + spec.gpu_count * SHARE_MILLI_FULL > quota.gpu_milli_limit):
        return f"namespace {spec.namespace} GPU quota exceeded ({quota.gpu_milli_limit / SHARE_MILLI_FULL:g} GPUs)"
    if quota.memory_mib_limit is not None and (
            quota.memory_mib_used - freed_memory + spec.memory_mib > quota.memory_mib_limit):
        return f"namespace {spec.namespace} memory quota exceeded ({quota.memory_mib_limit / MIB_PER_GB:g} GB)"
    return ""


def with_preemption(spec: DeploySpec, attempt: Callable[[], T], *, user: Any = None,
                    cluster: ClusterBackend | None = None) -> T:
    """``attempt()``; when it finds no capacity (not a quota), plan preemption: carry it out and
    try once more when allowed (``may_preempt_now``), else add to the ``NoCapacity`` what
    preemption would have taken and why it did not."""
    try:
        return attempt()
    except NoCapacity as error:
        if "quota" in error.message:
            raise
        plan = preemption_for(spec, cluster=cluster)
        if plan is None or not plan.victims:
            raise
        allowed, why = may_preempt_now(spec)
        over = _over_quota(spec, plan)
        if over:
            error.message = f"{error.message}; preemption would not help: {over}"
            error.preemption = {"node": plan.node, "victims": [v.key for v in plan.victims], "why_not": over}
            raise
        if not allowed:
            error.preemption = {"node": plan.node, "victims": [v.key for v in plan.victims], "why_not": why}
            error.message = f"{error.message}; preemption would {plan.describe()}, but {why}"
            raise
        _, stopped = carry_out(plan, by=f"{spec.namespace}/{spec.name}", user=user, cluster=cluster)
        if stopped:
            error.preemption = {"node": plan.node, "victims": [v.key for v in plan.victims], "why_not": stopped}
            error.message = f"{error.message}; preemption would {plan.describe()}, but it stopped: {stopped}"
            raise
    return attempt()
