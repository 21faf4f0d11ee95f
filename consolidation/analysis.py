"""The consolidation analysis: the cluster as it is now, fed to the pure planner, stored as a plan.

``cluster_for_consolidation`` reads every node once: each GPU's free milli (``allocated_milli``),
its MPS / time-slice client room (free slots; for weighted MPS the model's client limit minus
the partitions in use), its free MIG instances by profile; every active gpuplane placement as
a workload. What gpuplane may not move is marked do-not-disrupt: a deployment labelled
``gpuplane.io/do-not-disrupt=true`` and pods gpuplane did not place (found on a partition), so a
node holding one is never emptied. A node that is cordoned, not ready, or owned by an active
rollout is neither emptied nor a target. A workload moves only to a GPU of its own model (its
memory and speed stay as they were). Each deployment may lose at most its disruption budget of
replicas to moves in one plan: what the PodDisruptionBudgets that select its pods allow now
(``consolidation.budgets``), else ``CONSOLIDATION_MOVES_PER_DEPLOYMENT``; the plan's disruption
section lists each budget, its source and how much of it the plan uses. Namespace quotas go to
the planner as the scheduler enforces them (``namespace_quotas``), with each uniform MPS /
time-slicing node's slot (what a shared replica is charged there).

Nodes an approved or executing plan touches are left alone, as rollouts' are
(``consolidation.collisions``). ``run_analysis`` stores a plan only when it moves something; a
plan with exactly the moves of a proposed one refreshes that one instead of adding a duplicate,
and older proposed plans that collide with a new one are superseded (with the reason).

``fingerprint`` is, per node, what the plan relies on (readiness, cordon, sharing config, each
GPU's allocation, the active placements on it); ``changed_nodes`` compares it with now.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from consolidation.budgets import Budget, deployment_budgets
from consolidation.choices import PlanStatus
from consolidation.collisions import claimed_nodes, collision, plan_lock
from consolidation.models import PLAN_STATES, ConsolidationPlan
from consolidation.pricing import kwh_per_hour, price_usd_per_hour
from lifecycle.audit import record
from nodes.catalog import CATALOG
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend
from nodes.contract import ANNOTATION_DO_NOT_DISRUPT
from nodes.holds import free_partition_filter
from nodes.models import Node, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from rollouts.choices import ACTIVE_STATUSES
from rollouts.models import RolloutNode
from scheduler.adapters import namespace_quota
from scheduler.core.consolidation import (
    ConsolidationResult,
    PlanGPU,
    PlanNode,
    PlanQuota,
    PlanWorkload,
    plan_consolidation,
)
from scheduler.models import Deployment, Placement
from scheduler.services.releasing import ACTIVE_PLACEMENT

PRIORITY_RANK = {"high": 2, "medium": 1, "low": 0}
PLAN_PROPOSED = "consolidationplan.proposed"
PLAN_REFRESHED = "consolidationplan.refreshed"


def _free_partitions() -> tuple[dict[int, int], dict[int, Counter[str]], dict[int, int]]:
    """Per GPU pk: free slots (MPS / time-slice), free MIG instances by profile, partitions in use."""
    free_slots: dict[int, int] = defaultdict(int)
    free_mig: dict[int, Counter[str]] = defaultdict(Counter)
    free_ids = set(Partition.objects.filter(free_partition_filter()).values_list("pk", flat=True))
    in_use: dict[int, int] = defaultdict(int)
    for pk, gpu, kind, profile in Partition.objects.values_list("pk", "gpu_id", "kind", "mig_profile"):
        if pk not in free_ids:
            in_use[gpu] += 1
        elif kind == PartitionKind.MIG:
            free_mig[gpu][profile] += 1
        else:
            free_slots[gpu] += 1
    return free_slots, free_mig, in_use


def _placements() -> list[Placement]:
    return list(Placement.objects.filter(status__in=ACTIVE_PLACEMENT, node__isnull=False)
                .select_related("deployment", "node").order_by("pk"))


def cluster_for_consolidation(cluster: ClusterBackend | None = None
                              ) -> tuple[list[PlanNode], list[PlanWorkload], dict[str, Budget]]:
    """Nodes, workloads and disruption budgets for the planner (see the module docstring)."""
    owned = set(RolloutNode.objects.filter(rollout__status__in=ACTIVE_STATUSES).values_list("node_name", flat=True))
    owned |= claimed_nodes()  # an approved or executing plan relies on them as they are
    free_slots, free_mig, in_use = _free_partitions()
    nodes: list[PlanNode] = []
    for node in Node.objects.prefetch_related("gpus").order_by("name"):
        gpus = []
        for gpu in sorted(node.gpus.all(), key=lambda g: g.index):
            clients: int | None = None
            if node.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE):
                clients = free_slots.get(gpu.pk, 0)
            elif node.sharing_mode == SharingMode.MPS_WEIGHTED:
                model = CATALOG.get(gpu.model)
                clients = max(0, (model.mps_max_clients if model else 16) - in_use.get(gpu.pk, 0))
            gpus.append(PlanGPU(gpu.index, gpu.free_milli, clients, dict(free_mig.get(gpu.pk, {}))))
        uniform = node.sharing_mode in (SharingMode.MPS, SharingMode.TIMESLICE) and node.sharing_replicas
        nodes.append(PlanNode(node.name, tuple(gpus), node.sharing_mode, node.gpu_model,
                              cordoned=node.cordoned or not node.ready or node.name in owned,
                              slot_milli=SHARE_MILLI_FULL // node.sharing_replicas if uniform else None))
    workloads = []
    placements = _placements()
    deployments = {p.deployment.pk: p.deployment for p in placements}
    budgets = deployment_budgets(deployments.values(), cluster if cluster is not None else get_cluster())
    for placement in placements:
        deployment = placement.deployment
        marked = str(deployment.labels.get(ANNOTATION_DO_NOT_DISRUPT, "")).lower() == "true"
        workloads.append(PlanWorkload(
            key=str(placement.pk), group=str(deployment.pk), node=placement.node.name,
            gpus=tuple(placement.gpu_indexes or ()), share_milli=placement.share_milli,
            sharing=placement.sharing or "exclusive", mig_profile=placement.mig_profile,
            gpu_models=(placement.node.gpu_model,), priority=PRIORITY_RANK.get(deployment.priority, 1),
            namespace=deployment.namespace, quota_memory_mib=deployment.memory_mib,
            # Not placed by gpuplane (no partition kind): not ours to move.
            do_not_disrupt=marked or not placement.sharing))
    pods: dict[tuple[str, str], set[int]] = defaultdict(set)
    for pod, node_name, index in Partition.objects.exclude(pod="").values_list("pod", "gpu__node__name", "gpu__index"):
        pods[(pod, node_name)].add(index)
    for (pod, node_name), indexes in sorted(pods.items()):
        # Its GPUs too: a GPU it shares with a replica of ours is never counted as emptied.
        workloads.append(PlanWorkload(f"pod:{pod}", f"pod:{pod}", node_name, tuple(sorted(indexes)), 0,
                                      do_not_disrupt=True))
    return nodes, workloads, budgets


def namespace_quotas(namespaces: set[str]) -> dict[str, PlanQuota]:
    """The quota and use now of each of ``namespaces`` that has one, as the scheduler enforces it."""
    quotas = {}
    for namespace in sorted(namespaces):
        quota = namespace_quota(namespace)
        if quota is not None:
            quotas[namespace] = PlanQuota(quota.gpu_milli_limit, quota.gpu_milli_used,
                                          quota.memory_mib_limit, quota.memory_mib_used)
    return quotas


def fingerprint(node_names: list[str]) -> dict[str, Any]:
    """What a plan relies on, per node (see the module docstring); JSON-ready."""
    placements: dict[str, list[list[Any]]] = defaultdict(list)
    for p in Placement.objects.filter(status__in=ACTIVE_PLACEMENT, node__name__in=node_names).select_related("node"):
        placements[p.node.name].append([p.pk, sorted(p.gpu_indexes or ()), p.share_milli, p.mig_profile])
    found: dict[str, Any] = {}
    for node in Node.objects.filter(name__in=node_names).prefetch_related("gpus"):
        found[node.name] = {
            "ready": node.ready, "cordoned": node.cordoned, "sharing_mode": node.sharing_mode,
            "sharing_replicas": node.sharing_replicas,
            "gpus_allocated_milli": [g.allocated_milli for g in sorted(node.gpus.all(), key=lambda g: g.index)],
            "placements": sorted(placements.get(node.name, [])),
        }
    return found


def changed_nodes(plan: ConsolidationPlan) -> list[str]:
    """'<node>: <what changed>' for every node the plan relies on that is not as it was."""
    now = fingerprint(list(plan.fingerprint))
    changes = []
    for name, then in sorted(plan.fingerprint.items()):
        current = now.get(name)
        if current is None:
            changes.append(f"{name}: gone")
            continue
        fields = [key for key in then if then[key] != current.get(key)]
        if fields:
            changes.append(f"{name}: {', '.join(fields)} changed")
    return changes


def _move_rows(result: ConsolidationResult) -> list[dict[str, Any]]:
    placements = {str(p.pk): p for p in Placement.objects.filter(
        pk__in=[int(m.workload) for m in result.moves]).select_related("deployment")}
    rows = []
    for move in result.moves:
        placement = placements[move.workload]
        deployment = placement.deployment
        rows.append({**move.as_dict(), "placement": placement.pk, "deployment": deployment.pk,
                     "workload": f"{deployment.namespace}/{deployment.name} replica {placement.replica_index}"})
    return rows


def _savings(gpus_freed: tuple[tuple[str, int], ...]) -> tuple[float, float]:
    """Money and energy per hour of every GPU the plan empties (those of the freed nodes included):
    what the savings page gains once it is executed, since it counts GPUs in use."""
    freed = set(gpus_freed)
    usd = kwh = 0.0
    for node in Node.objects.filter(name__in={name for name, _ in freed}).prefetch_related("gpus"):
        for gpu in node.gpus.all():
            if (node.name, gpu.index) in freed:
                model = gpu.model or node.gpu_model
                usd += price_usd_per_hour(model)
                kwh += kwh_per_hour(model)
    return round(usd, 4), round(kwh, 4)


def _budget_rows(result: ConsolidationResult, budgets: dict[str, Budget]) -> list[dict[str, Any]]:
    """Per deployment the plan moves, that a PDB covers, or that may not move at all: its budget,
    where it comes from, and how much of it the plan uses."""
    shown = {key for key, budget in budgets.items() if budget.from_pdb or not budget.allowed} | set(result.pdb_budget_used)
    names = {str(pk): f"{ns}/{name}" for pk, ns, name in Deployment.objects.filter(
        pk__in=[int(key) for key in shown]).values_list("pk", "namespace", "name")}
    return [{"deployment": int(key), "workload": names.get(key, key), "allowed": budgets[key].allowed,
             "moved": result.pdb_budget_used.get(key, 0), "source": budgets[key].source}
            for key in sorted(shown, key=int) if key in budgets]


@dataclass(frozen=True)
class Analysis:
    """What one analysis did: ``plan`` is the proposed plan it made (``created``) or found with
    exactly its moves and refreshed; None when there is nothing to consolidate now (no plan is
    stored then: an empty plan is no proposal). ``superseded``: older proposed plans it replaced."""

    plan: ConsolidationPlan | None
    created: bool
    superseded: tuple[int, ...]
    method: str
    skipped: tuple[dict[str, Any], ...]
    budgets: tuple[dict[str, Any], ...] = ()

    @property
    def detail(self) -> str:
        if self.plan is None:
            return "Nothing to consolidate now: no move would free a node or a GPU (see skipped)."
        if not self.created:
            return f"The analysis found the moves of plan {self.plan.pk} again: it was refreshed (fingerprint, expiry)."
        superseded = f"; it supersedes plan(s) {', '.join(map(str, self.superseded))}" if self.superseded else ""
        return f"Plan {self.plan.pk} proposed: {len(self.plan.moves)} move(s){superseded}."


def run_analysis(*, actor: Any = None, cluster: ClusterBackend | None = None) -> Analysis:
    """Run the planner on the cluster now; store its plan as proposed, or refresh the proposed plan
    that has exactly its moves, superseding older proposed plans that collide with it (they were
    made on an older view of the cluster). Nothing is stored when there is nothing to move."""
    nodes, workloads, budgets = cluster_for_consolidation(cluster)
    result = plan_consolidation(nodes, workloads, budgets={k: b.allowed for k, b in budgets.items()},
                                policy=settings.CONSOLIDATION_POLICY,
                                quotas=namespace_quotas({w.namespace for w in workloads if w.namespace}))
    skipped = tuple({"node": s.node, "gpu": s.gpu, "reason": s.reason} for s in result.skipped)
    budget_rows = _budget_rows(result, budgets)
    if not result.moves:
        return Analysis(None, False, (), result.method, skipped, tuple(budget_rows))
    touched = sorted({m.from_node for m in result.moves} | {m.to_node for m in result.moves})
    usd, kwh = _savings(result.gpus_freed)
    fields = {
        "moves": _move_rows(result), "nodes_freed": list(result.nodes_freed), "gpus_freed": len(result.gpus_freed),
        "savings_usd_per_hour": usd, "savings_kwh_per_hour": kwh,
        "disruption": {"workloads_moved": result.workloads_moved, "pdb_budget_used": dict(result.pdb_budget_used),
                       "budgets": budget_rows},
        "method": result.method, "skipped": list(skipped), "fingerprint": fingerprint(touched),
        "expires_at": timezone.now() + timedelta(seconds=settings.CONSOLIDATION_PLAN_TTL_S),
    }
    with transaction.atomic():
        plan_lock()
        proposed = list(ConsolidationPlan.objects.select_for_update().filter(status=PlanStatus.PROPOSED).order_by("pk"))
        same = next((p for p in proposed if _move_keys(p.moves) == _move_keys(fields["moves"])), None)
        if same is not None and _refresh(same, fields, actor):
            return Analysis(same, False, (), result.method, skipped, tuple(budget_rows))
        plan = ConsolidationPlan.objects.create(status=PlanStatus.PROPOSED,
                                                created_by=actor if getattr(actor, "pk", None) else None, **fields)
        record(PLAN_PROPOSED, plan, actor=actor or "consolidation",
               reason=f"{len(result.moves)} move(s) free {len(result.nodes_freed)} node(s) and "
                      f"{len(result.gpus_freed)} GPU(s)",
               after={"status": plan.status, "nodes_freed": plan.nodes_freed})
        superseded = []
        for old in proposed:
            why = collision(old, plan)
            if why and PLAN_STATES.move(old, PlanStatus.SUPERSEDED, actor=actor or "consolidation",
                                        reason=f"superseded by plan {plan.pk}, made on a newer view of the cluster "
                                               f"({why.replace(f'plan {plan.pk} (proposed) ', 'it ')})"):
                superseded.append(old.pk)
    return Analysis(plan, True, tuple(superseded), result.method, skipped, tuple(budget_rows))


def analyse(*, actor: Any = None, cluster: ClusterBackend | None = None) -> ConsolidationPlan | None:
    """``run_analysis``'s plan: the proposed plan (new or refreshed), None when nothing would move."""
    return run_analysis(actor=actor, cluster=cluster).plan


def _move_keys(moves: list[dict[str, Any]]) -> set[tuple[int, str]]:
    """What makes two plans' moves the same: each replica and the node it goes to."""
    return {(int(m["placement"]), str(m["to_node"])) for m in moves}


def _refresh(plan: ConsolidationPlan, fields: dict[str, Any], actor: Any) -> bool:
    """Bring a proposed plan up to date with this analysis (same moves): what it relies on, its
    savings, its expiry; False when it is no longer proposed."""
    if not ConsolidationPlan.objects.filter(pk=plan.pk, status=PlanStatus.PROPOSED).update(
            **fields, updated_at=timezone.now()):
        return False
    plan.refresh_from_db()
    record(PLAN_REFRESHED, plan, actor=actor or "consolidation",
           reason="a new analysis found the same moves: what it relies on and its expiry are brought up to date",
           after={"expires_at": plan.expires_at.isoformat()})
    return True
