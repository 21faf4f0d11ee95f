"""Preemption: when a request cannot fit, which lower-priority placements would make room, and
(when an admin turned it on) evicting them and placing the request.

``preemption_for(spec)`` builds the planner's inputs from the inventory (every active placement
of lower priority on a node whose mode can give the request what it asks for, each with its
PriorityLevel value, its admission time and whether a PodDisruptionBudget leaves it no disruption)
and the oracle "does the request fit on this node without these placements" from the placement
engine itself; ``scheduler.core.preemption.plan_preemption`` chooses. ``carry_out`` is the one
function that executes a plan. It releases each victim through ``release_replica`` (its workload
scaled down or deleted, its partitions freed, the victim's deployment told why, audited); once the
mover of issue 18 lands (Eviction API, PDBs read live, disruption budgets, replacement first),
this function hands each victim to it as a move with no destination instead, and nothing else
changes. With preemption off (the default), a refusal says what preemption would have taken.
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.core.cache import cache
from django.db.models import Sum
from django.utils import timezone

from lifecycle.audit import record
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError, ClusterPDB
from nodes.contract import LABEL_DEPLOYMENT, LABEL_MANAGED_BY, MANAGED_BY_GPUPLANE
from nodes.models import Node, Partition
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL, SharingMode
from scheduler.adapters import PLACEMENT_OCCUPANT, namespace_quota, read_nodes
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.core import ClusterSnapshot, NodeState, Outcome, Priority, Scheduler, SharingRequest
from scheduler.core.preemption import Candidate, PreemptionPlan, plan_preemption
from scheduler.core.types import MODE_KINDS, REQUEST_KINDS
from scheduler.models import AdmissionSettings, Deployment, Placement, PriorityLevel
from scheduler.services.deciding import placement_request, placement_scheduler
from scheduler.services.errors import NoCapacity
from scheduler.services.releasing import release_replica
from scheduler.services.spec import DeploySpec
from scheduler.services.watching import fail_deployment

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Seed 002's values, where the PriorityLevel rows were removed.
DEFAULT_VALUES = {Priority.HIGH: 1000, Priority.MEDIUM: 500, Priority.LOW: 100}
ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


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
    try:
        pdbs = (cluster if cluster is not None else get_cluster()).list_pdbs()
    except ClusterError:
        logger.warning("could not read PodDisruptionBudgets; no placement is a preemption candidate", exc_info=True)
        return None
    live: dict[int, int] = {}
    for p in placements:
        live[p.deployment_id] = live.get(p.deployment_id, 0) + 1
    candidates = [
        Candidate(PLACEMENT_OCCUPANT.format(id=p.pk), p.node.name, values.get(p.deployment.priority, 0),
                  admitted=(p.deployment.placed_at or p.created_at).timestamp(),
                  blocked=_blocked(p.deployment, pdbs, live[p.deployment_id]))
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


def carry_out(plan: PreemptionPlan, *, by: str, user: Any = None, cluster: ClusterBackend | None = None) -> int:
    """Evict ``plan``'s victims (the one way preemption acts; see the module docstring); return how many."""
    evicted = 0
    for victim in plan.victims:
        placement_id = int(victim.key.split(":", 1)[1])
        placement = Placement.objects.select_related("deployment").filter(pk=placement_id).first()
        if placement is None:
            continue
        reason = (f"preempted by {by} (priority {victim.priority} is below the request's): "
                  f"replica {placement.replica_index} on {plan.node} was evicted to make room")
        if release_replica(placement.deployment, placement.replica_index, user=user, reason=reason, cluster=cluster):
            record("placement.preempted", placement, actor=user, reason=reason)
            if Placement.objects.filter(deployment_id=placement.deployment_id, status__in=ACTIVE).exists():
                Deployment.objects.filter(pk=placement.deployment_id).update(message=reason)
            else:  # nothing of it runs any more: failed, and says why
                fail_deployment(placement.deployment, reason)
            evicted += 1
    return evicted


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
        carry_out(plan, by=f"{spec.namespace}/{spec.name}", user=user, cluster=cluster)
    return attempt()
