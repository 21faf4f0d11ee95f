"""Deploy, watch and delete: the transactions of the placement pipeline (DESIGN.md section 3).

``deploy`` validates a request, decides every replica on a fresh snapshot of the inventory,
reserves all of them in one transaction (all or nothing), then creates the workloads on the
cluster; any failure after the reservation releases exactly what was reserved. Views, API and
tasks call these functions and hold no logic of their own.

Reservation and concurrency
---------------------------
Capacity is claimed with conditional updates: a partition row is taken only if it is still free
(``UPDATE ... WHERE placement_id IS NULL AND pod = ''`` must change one row), GPU counters move
with ``F()`` expressions and the database's check constraints (``allocated_milli <= 1000``,
``allocated_memory_mib <= memory_mib``, unique slot per GPU) refuse anything that would
over-allocate; an IntegrityError is a conflict, never a 500. Row locks are taken GPUs first in
primary-key order, then partitions, like inventory sync, so the two cannot deadlock.

Deciding takes milliseconds, so it runs outside the reservation transaction on the first try
(optimistic: concurrent deploys decide in parallel and only the short reservation serialises on
row locks). A conflict means another writer took what we chose; the retries then decide *inside*
the transaction under an exclusive placement lock (a PostgreSQL advisory lock; on SQLite every
write transaction already holds the database's write lock, settings ``transaction_mode
IMMEDIATE``), on a snapshot read after the lock, so they cannot conflict with another deploy.
Optimistic reservations take the same lock in shared mode, so they never slip in between a
serialised decision and its reservation. A retry can still meet inventory sync; after
``MAX_ATTEMPTS`` the request is answered with ``NoCapacity`` (HTTP 409), and nothing is stored.

Default scheduler (seed 004)
----------------------------
``enable_gpu_selection=False`` skips selection: every replica goes to the default Kubernetes
scheduler (decision outcome "skipped"). Otherwise, when no node qualifies and the request
allows it, a replica is handed to the default scheduler only if some node was turned away by
telemetry alone (utilization over the limit) - Kubernetes may still run it there; when every
node lacks capacity, handing over could only leave a pod Pending, so the answer is 409.
Handed-over replicas reserve nothing: inventory sync counts their pods once they bind.

Namespace quotas
----------------
A ``NamespaceQuota`` row caps the compute share (milli-GPU) and the memory need that a
namespace's active deployments hold (``adapters.namespace_quota`` sums them); the core's
NamespaceQuota filter turns a request away where it would exceed either. The decision may have
read a use that is stale by the time it reserves, so a reservation in a namespace with a quota
takes the placement lock exclusively and re-checks the use, its own claims included, before it
commits (``_check_quota``); over the limit it is a conflict, and the serialised retry decides
again on the real use (answering ``NoCapacity`` that names the quota). Replicas handed to the
default scheduler hold nothing gpuplane can charge, so a namespace with a quota is never handed
over. A quota created while a deploy of its namespace is reserving applies from the next one.

Bind failures and watching
--------------------------
The workloads are created after the reservation commits. If the cluster refuses one (or any
error interrupts the creation), every workload name of the deployment is deleted (a create that
timed out may have been stored all the same; names not there are ignored), every partition is
released, the deployment is marked FAILED with the cluster's message, and ``DeployFailed`` (a
``ClusterError``) is raised: the API answers 502 with that message. Once the workloads exist
and the deployment is PLACED, ``scheduler.tasks.watch_deployment_task`` is enqueued: it calls
``watch_deployment`` until every workload is ready (RUNNING), or fails and releases it after
``DEPLOYMENT_WATCH_TIMEOUT_S``. Enqueueing never fails a deploy (a broker outage is logged);
``sweep_deployments`` (from beat, every 30 s) watches every pending or placed deployment nobody
looked at for a watch interval, so a watch never enqueued, out of retries or lost with its
worker, and a deployment left PENDING by a process that died, still end RUNNING or released.
"""
from __future__ import annotations

import logging
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from gpuplane.observability import PLACEMENT_DECISION_SECONDS
from nodes.cluster.base import ClusterBackend, ClusterError, NotFound, get_cluster
from nodes.contract import RESERVED_LABEL_KEYS, RESERVED_LABEL_PREFIX
from nodes.models import GPU, Partition
from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL, PartitionKind
from scheduler.adapters import InventorySnapshot, PartitionClaim, build_snapshot, namespace_quota, partition_claims
from scheduler.choices import DecisionOutcome, DeploymentStatus, PlacementStatus
from scheduler.core import (
    Outcome,
    PlacementRequest,
    Priority,
    ProfileError,
    QuotaUsage,
    Scheduler,
    ScheduleResult,
    SharingRequest,
    WorkloadType,
    build_profile,
)
from scheduler.core.profiles import PROFILES
from scheduler.models import Decision, Deployment, Placement
from scheduler.workloads import group_placements, workload_specs

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
MAX_MEMORY_GB = 4096
MAX_GPU_COUNT = 16  # the largest GPU nodes have 16; a gang must fit on one node
MAX_LATENCY_SLO_MS = 86_400_000
# Arbitrary but fixed: the key of the PostgreSQL advisory lock that serialises placement retries.
PLACEMENT_LOCK_KEY = 7_245_002_194_617_303_041
# Filters whose rejection reflects telemetry, not capacity: the default scheduler may still run
# the workload where they said no (see "Default scheduler" above).
TELEMETRY_FILTERS = frozenset({"UtilizationLimit"})
# PostgreSQL: deadlock detected, serialization failure. SQLite: the write lock timed out.
_RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
# Label keys gpuplane sets itself (selectors and sync depend on them).
_RESERVED_LABEL_KEYS = RESERVED_LABEL_KEYS
_RESERVED_LABEL_PREFIX = RESERVED_LABEL_PREFIX
_ACTIVE = (DeploymentStatus.PENDING, DeploymentStatus.PLACED, DeploymentStatus.RUNNING)


# ---- the request -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeploySpec:
    """A deploy request, as the REST API and the deploy form take it (``validate_spec`` checks it)."""

    name: str
    model: str
    memory_gb: float
    gpu_count: int = 1
    replicas: int = 1
    workload_type: str = WorkloadType.INFERENCE
    priority: str = Priority.MEDIUM
    latency_slo_ms: int | None = None
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    sharing: str = SharingRequest.AUTO
    enable_gpu_selection: bool = True
    allow_default_scheduler: bool = True

    @property
    def memory_mib(self) -> int:
        """The memory need in MiB, rounded up (a model never gets less than it asked for)."""
        return math.ceil(float(self.memory_gb) * MIB_PER_GB)


class NoCapacity(Exception):
    """Nothing fits (HTTP 409); nothing was stored.

    ``message`` reads like kube-scheduler's ("0/12 nodes are available: ..."); ``decision`` is the
    core ``ScheduleResult.to_dict()`` of the replica that could not be placed, ``replica_index`` its index.
    """

    def __init__(self, message: str, decision: dict[str, Any], replica_index: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.decision = decision
        self.replica_index = replica_index


class DeployFailed(ClusterError):
    """The cluster refused a workload; everything reserved was released and the deployment is FAILED."""

    def __init__(self, message: str, deployment: Deployment) -> None:
        super().__init__(message)
        self.message = message
        self.deployment = deployment


class _Conflict(Exception):
    """Another writer took capacity this attempt chose; the attempt is rolled back and retried."""


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _check_text(errors: dict[str, list[str]], name: str, value: Any, *, max_length: int) -> None:
    if not _is_text(value):
        errors[name].append("Enter text.")
    elif "\x00" in value:
        errors[name].append("Null characters are not allowed.")
    elif not value.strip():
        errors[name].append("This field may not be blank.")
    elif len(value) > max_length:
        errors[name].append(f"Ensure this field has no more than {max_length} characters.")
    elif _CONTROL_CHARS.search(value):
        errors[name].append("Control characters are not allowed.")


def _check_dns_label(errors: dict[str, list[str]], name: str, value: Any) -> None:
    _check_text(errors, name, value, max_length=63)
    if not errors[name] and not _DNS_LABEL.match(value):
        errors[name].append(
            "Enter a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit."
        )


def _check_int(errors: dict[str, list[str]], name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        errors[name].append("Enter a whole number.")
    elif not low <= value <= high:
        errors[name].append(f"Enter a whole number from {low} to {high}.")


def label_errors(labels: Any) -> list[str]:
    """Why ``labels`` is not a valid set of Kubernetes labels for a workload ([] when it is).

    Keys: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters
    (alphanumerics, '-', '_', '.'; alphanumeric at both ends). Values: empty or such a name.
    gpuplane's own keys (``gpuplane.io/*``, ``app.kubernetes.io/managed-by`` and ``/name``) are refused.
    """
    if not isinstance(labels, Mapping):
        return ["Enter an object of label names to string values."]
    errors = []
    for key, value in labels.items():
        if not _is_text(key) or not _is_text(value):
            errors.append(f"Label {key!r}: keys and values must be strings.")
            continue
        if "\x00" in key or "\x00" in value:
            errors.append("Null characters are not allowed.")
            continue
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or len(name) > 63 \
                or not _LABEL_NAME.match(name):
            errors.append(f"Label key {key!r} is not a valid Kubernetes label key.")
        elif key in _RESERVED_LABEL_KEYS or prefix == _RESERVED_LABEL_PREFIX or prefix.endswith("." + _RESERVED_LABEL_PREFIX):
            errors.append(f"Label key {key!r} is set by gpuplane.")
        elif value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            errors.append(f"Label {key!r}: {value!r} is not a valid Kubernetes label value.")
    return errors


def validate_spec(spec: DeploySpec) -> DeploySpec:
    """Check a request; return it with normalised values (``memory_gb`` a float, labels a dict).

    Raises ``ValidationError`` with messages per ``DeploySpec`` field name (the API answers 400
    with them, the deploy form shows them under its fields). Rules: ``name`` and ``namespace``
    are DNS-1123 labels; ``model`` is 1-200 characters without control characters; ``memory_gb``
    a finite number in (0, 4096]; ``gpu_count`` 1-16; ``replicas`` 1-``DEPLOYMENT_MAX_REPLICAS``;
    ``latency_slo_ms`` empty or 1-86,400,000; the choice fields one of their values; ``labels``
    valid Kubernetes labels (``label_errors``). A multi-GPU replica takes whole GPUs, so only
    ``auto`` and ``exclusive`` sharing go with ``gpu_count`` > 1 (time-slicing especially: its
    replicas may land on one physical GPU).
    """
    errors: dict[str, list[str]] = defaultdict(list)
    _check_dns_label(errors, "name", spec.name)
    _check_dns_label(errors, "namespace", spec.namespace)
    _check_text(errors, "model", spec.model, max_length=Deployment._meta.get_field("model").max_length)
    memory = spec.memory_gb
    if isinstance(memory, bool) or not isinstance(memory, int | float) or not math.isfinite(memory):
        errors["memory_gb"].append("Enter a number.")
    elif not 0 < memory <= MAX_MEMORY_GB:
        errors["memory_gb"].append(f"Enter a number of GB greater than 0 and at most {MAX_MEMORY_GB}.")
    _check_int(errors, "gpu_count", spec.gpu_count, 1, MAX_GPU_COUNT)
    _check_int(errors, "replicas", spec.replicas, 1, settings.DEPLOYMENT_MAX_REPLICAS)
    if spec.latency_slo_ms is not None:
        _check_int(errors, "latency_slo_ms", spec.latency_slo_ms, 1, MAX_LATENCY_SLO_MS)
    for name, choices in (("workload_type", WorkloadType), ("priority", Priority), ("sharing", SharingRequest)):
        value = getattr(spec, name)
        if value not in choices.values():
            errors[name].append(f"Choose one of: {', '.join(choices.values())}.")
    for name in ("enable_gpu_selection", "allow_default_scheduler"):
        if not isinstance(getattr(spec, name), bool):
            errors[name].append("Enter true or false.")
    errors["labels"].extend(label_errors(spec.labels))
    if (
        not errors["gpu_count"] and not errors["sharing"] and spec.gpu_count > 1
        and spec.sharing not in (SharingRequest.AUTO, SharingRequest.EXCLUSIVE)
    ):
        errors["sharing"].append(
            f"A replica of {spec.gpu_count} GPUs takes whole GPUs: {spec.sharing} gives one GPU per replica "
            "(time-sliced replicas could even share one physical GPU). Use auto or exclusive."
        )
    found = {name: messages for name, messages in errors.items() if messages}
    if found:
        raise ValidationError(found)
    return replace(spec, memory_gb=float(memory), labels=dict(spec.labels))


# ---- deciding ----------------------------------------------------------------------------------


def placement_scheduler() -> Scheduler:
    """A ``Scheduler`` for the configured profile, with the settings' top-K, idle thresholds and
    classification applied. Raises ``ImproperlyConfigured`` for an unknown or invalid profile."""
    name = settings.GPUPLANE_SCHEDULER_PROFILE
    profiles = {**PROFILES, **getattr(settings, "SCHEDULER_PROFILES", {})}
    if name not in profiles:
        raise ImproperlyConfigured(f"GPUPLANE_SCHEDULER_PROFILE {name!r} is not a profile ({', '.join(sorted(profiles))})")
    data = dict(profiles[name])
    data["name"] = name
    data["top_k"] = settings.DECISION_MATRIX_TOP_K
    data["fallback"] = {
        **dict(data.get("fallback") or {}),
        "idle_utilization_pct": settings.IDLE_UTILIZATION_PCT,
        "idle_memory_pct": settings.IDLE_MEMORY_PCT,
    }
    data["classification"] = {**dict(data.get("classification") or {}),
                              **getattr(settings, "SCHEDULER_CLASSIFICATION", {})}
    try:
        return Scheduler(build_profile(data))
    except (ProfileError, ValueError, KeyError) as error:
        raise ImproperlyConfigured(f"scheduling profile {name!r}: {error}") from error


@dataclass
class ReplicaPlan:
    """One replica's decision: its outcome, the stored matrix and (when placed) its claims."""

    replica_index: int
    outcome: str
    decision: ScheduleResult
    matrix: dict[str, Any]
    message: str
    duration_ms: float
    claims: list[PartitionClaim] = field(default_factory=list)


def _request(spec: DeploySpec, replica_index: int, quota: QuotaUsage | None) -> PlacementRequest:
    return PlacementRequest(
        key=f"{spec.namespace}/{spec.name}#{replica_index}",
        memory_mib=spec.memory_mib,
        gpu_count=spec.gpu_count,
        priority=Priority(spec.priority),
        latency_slo_ms=spec.latency_slo_ms,
        workload_type=WorkloadType(spec.workload_type),
        namespace=spec.namespace,
        sharing=SharingRequest(spec.sharing),
        enable_gpu_selection=spec.enable_gpu_selection,
        # The fallback is the services' call (see the module docstring), not the core's.
        allow_default_scheduler=False,
        quota=quota,
    )


def _telemetry_rejections(decision: ScheduleResult, scheduler: Scheduler) -> int:
    """Nodes turned away by telemetry alone (they passed every capacity filter before it)."""
    reasons = {reason for plugin in scheduler.profile.filters if plugin.NAME in TELEMETRY_FILTERS
               for reason in plugin.reasons}
    return sum(count for reason, count in decision.diagnosis.rejected.items() if reason in reasons)


def decide(spec: DeploySpec, inventory: InventorySnapshot, scheduler: Scheduler, *,
           quota: QuotaUsage | None = None) -> list[ReplicaPlan]:
    """Decide every replica on ``inventory`` (each sees the ones before it); raise ``NoCapacity``.

    ``quota`` is the namespace's quota and use (``adapters.namespace_quota``), None for none;
    each replica is checked against it with the replicas before it counted as used. A namespace
    with a quota is never handed to the default scheduler, neither for busy nodes nor with
    selection disabled (``NoCapacity``): what that scheduler gives is not charged to the quota
    (see "Namespace quotas"). Each plan's ``matrix`` is the core's ``ScheduleResult.to_dict()`` plus
    ``plugins``, the score plugins in profile order (a stored ``weights`` object loses its key
    order on PostgreSQL). Observes each decision's duration into ``PLACEMENT_DECISION_SECONDS``.
    """
    plans = []
    for replica_index in range(spec.replicas):
        started = time.perf_counter()
        decision = scheduler.schedule(_request(spec, replica_index, quota), inventory.snapshot)
        elapsed = time.perf_counter() - started
        PLACEMENT_DECISION_SECONDS.observe(elapsed)
        matrix = decision.to_dict()
        # PostgreSQL's jsonb does not keep key order: keep the profile's plugin order as a list.
        matrix["plugins"] = list(decision.weights)
        message = decision.message
        if decision.outcome == Outcome.PLACED:
            assert decision.assignment is not None
            plan = ReplicaPlan(replica_index, DecisionOutcome.PLACED, decision, matrix, message, elapsed * 1000,
                               claims=partition_claims(decision.assignment, inventory.index))
            if quota is not None:  # the next replica sees this one as used
                quota = replace(quota, gpu_milli_used=quota.gpu_milli_used + decision.assignment.share_milli,
                                memory_mib_used=quota.memory_mib_used + spec.memory_mib)
        elif decision.outcome == Outcome.DEFAULT_SCHEDULER:  # only when selection is disabled
            if quota is not None:
                message = (f"namespace {spec.namespace} has a quota, so GPU selection cannot be skipped: the "
                           "default Kubernetes scheduler's choice would not be charged to it")
                matrix["outcome"] = DecisionOutcome.UNSCHEDULABLE.value
                matrix["message"] = message
                raise NoCapacity(message, matrix, replica_index)
            plan = ReplicaPlan(replica_index, DecisionOutcome.SKIPPED, decision, matrix, message, elapsed * 1000)
        elif (spec.allow_default_scheduler and quota is None
              and (busy := _telemetry_rejections(decision, scheduler))):
            message = (f"{message}; handed over to the default Kubernetes scheduler (no node affinity): "
                       f"{busy} node(s) have the capacity but are busy by telemetry")
            matrix["outcome"] = DecisionOutcome.DEFAULT_SCHEDULER.value
            matrix["message"] = message
            plan = ReplicaPlan(replica_index, DecisionOutcome.DEFAULT_SCHEDULER, decision, matrix, message,
                               elapsed * 1000)
        else:
            raise NoCapacity(message, matrix, replica_index)
        plans.append(plan)
    return plans


# ---- reserving ---------------------------------------------------------------------------------


def _placement_lock(*, exclusive: bool) -> None:
    """Take the placement lock for the current transaction (see the module docstring)."""
    if connection.vendor == "postgresql":
        function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(%s)", [PLACEMENT_LOCK_KEY])
    # SQLite (transaction_mode IMMEDIATE): the transaction already holds the write lock.


def _retryable(error: OperationalError) -> bool:
    cause = error.__cause__
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    return connection.vendor == "sqlite" and "locked" in str(error)


def _lock_gpus(gpu_pks: Iterable[int]) -> None:
    """Row-lock GPUs in primary-key order (inventory sync's order: no deadlock between us)."""
    pks = sorted(set(gpu_pks))
    if pks:
        list(GPU.objects.select_for_update().filter(pk__in=pks).order_by("pk").values_list("pk", flat=True))


def _claim(claim: PartitionClaim, placement_id: int) -> tuple[int, int]:
    """Claim one partition for a placement; return the (milli, MiB) to charge its GPU.

    Raises ``_Conflict`` when no candidate row is free any more.
    """
    free = {"placement__isnull": True, "pod": ""}
    if claim.create:
        values = {"placement_id": placement_id, "share_milli": claim.share_milli, "memory_mib": claim.memory_mib}
        # A left-over free share at our slot (its pod just left) is taken over rather than duplicated.
        for row in claim.candidates:
            if Partition.objects.filter(pk=row.pk, kind=claim.kind, **free).update(**values) == 1:
                return claim.share_milli, claim.memory_mib
        Partition.objects.create(gpu_id=claim.gpu_pk, kind=claim.kind, slot=claim.slot, **values)
        return claim.share_milli, claim.memory_mib
    for row in claim.candidates:
        if Partition.objects.filter(pk=row.pk, kind=claim.kind, **free).update(placement_id=placement_id) == 1:
            memory = claim.memory_mib if claim.kind == PartitionKind.TIMESLICE else row.memory_mib
            return row.share_milli, memory
    raise _Conflict(f"GPU {claim.gpu_index}: no free {claim.kind} partition left")


def _reserve(spec: DeploySpec, plans: list[ReplicaPlan], node_pks: Mapping[str, int], user: Any) -> Deployment:
    """Store the deployment, its placements and decisions and claim their partitions.

    Must run inside a transaction; raises ``_Conflict`` or ``IntegrityError`` when capacity was
    taken meanwhile (the caller rolls back and retries).
    """
    deployment = Deployment.objects.create(
        name=spec.name, model=spec.model, memory_mib=spec.memory_mib, gpu_count=spec.gpu_count,
        replicas=spec.replicas, workload_type=spec.workload_type, priority=spec.priority,
        latency_slo_ms=spec.latency_slo_ms, namespace=spec.namespace, labels=dict(spec.labels),
        sharing=spec.sharing, enable_gpu_selection=spec.enable_gpu_selection, status=DeploymentStatus.PENDING,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    placements = []
    for plan in plans:
        assignment = plan.decision.assignment
        if plan.outcome == DecisionOutcome.PLACED and assignment is not None:
            first = assignment.partitions[0]
            placement = Placement(
                deployment=deployment, node_id=node_pks[assignment.node], replica_index=plan.replica_index,
                sharing=str(assignment.kind), gpu_indexes=list(assignment.gpu_indexes),
                share_milli=first.share_milli, memory_mib=first.memory_mib, mig_profile=first.mig_profile,
                resources=dict(assignment.resources), env=dict(assignment.env),
            )
        else:
            placement = Placement(deployment=deployment, node=None, replica_index=plan.replica_index)
        placements.append(placement)
    for group in group_placements(deployment, placements):
        for placement in group.placements:
            placement.workload_name = group.name
    Placement.objects.bulk_create(placements)
    if any(p.pk is None for p in placements):  # pragma: no cover - both supported databases return ids
        by_index = dict(deployment.placements.values_list("replica_index", "pk"))
        for placement in placements:
            placement.pk = by_index[placement.replica_index]

    claims = [(claim, placement) for plan, placement in zip(plans, placements, strict=True) for claim in plan.claims]
    _lock_gpus(claim.gpu_pk for claim, _ in claims)
    charges: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for claim, placement in sorted(claims, key=lambda item: (item[0].gpu_pk, item[0].slot)):
        milli, memory = _claim(claim, placement.pk)
        charges[claim.gpu_pk][0] += milli
        charges[claim.gpu_pk][1] += memory
    for gpu_pk, (milli, memory) in sorted(charges.items()):
        # The check constraints refuse an over-allocated counter (IntegrityError: a conflict).
        updated = GPU.objects.filter(pk=gpu_pk).update(
            allocated_milli=F("allocated_milli") + milli, allocated_memory_mib=F("allocated_memory_mib") + memory
        )
        if updated != 1:
            raise _Conflict(f"GPU {gpu_pk} is gone")

    Decision.objects.bulk_create(
        Decision(
            deployment=deployment, replica_index=plan.replica_index, outcome=plan.outcome,
            node_id=node_pks.get(plan.decision.node) if plan.decision.node else None,
            profile=plan.decision.profile_name, weights=dict(plan.decision.weights), matrix=plan.matrix,
            message=plan.message, duration_ms=plan.duration_ms,
        )
        for plan in plans
    )
    # No watch is enqueued here: an eager one would run before the workloads exist. A deployment
    # left PENDING by a crash before ``_execute`` is found by the sweeper and failed on timeout.
    return deployment


def _check_quota(namespace: str) -> None:
    """Refuse (``_Conflict``) a reservation that took the namespace over its quota.

    Runs after the claims, in the reservation's transaction, under the exclusive placement lock:
    the use it reads includes this reservation and every committed one, and no other
    reservation can commit in between. A decision made on a use that was stale by then is
    retried, serialised, on the real one (which answers ``NoCapacity`` naming the quota).
    """
    quota = namespace_quota(namespace)
    if quota is None:
        return
    over = []
    if quota.gpu_milli_limit is not None and quota.gpu_milli_used > quota.gpu_milli_limit:
        over.append(f"{quota.gpu_milli_used} of {quota.gpu_milli_limit} milli-GPU")
    if quota.memory_mib_limit is not None and quota.memory_mib_used > quota.memory_mib_limit:
        over.append(f"{quota.memory_mib_used} of {quota.memory_mib_limit} MiB")
    if over:
        raise _Conflict(f"namespace {namespace} quota exceeded: {', '.join(over)} with this reservation")


def _decide_and_reserve(spec: DeploySpec, user: Any) -> Deployment:
    """Decide and reserve with bounded retries (see "Reservation and concurrency")."""
    scheduler = placement_scheduler()
    last_conflict = ""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        serialised = attempt > 1
        try:
            if serialised:
                with transaction.atomic():
                    _placement_lock(exclusive=True)
                    inventory = build_snapshot()
                    quota = namespace_quota(spec.namespace)
                    plans = decide(spec, inventory, scheduler, quota=quota)
                    deployment = _reserve(spec, plans, inventory.index.node_pk, user)
                    if quota is not None:
                        _check_quota(spec.namespace)
                    return deployment
            inventory = build_snapshot()
            quota = namespace_quota(spec.namespace)
            plans = decide(spec, inventory, scheduler, quota=quota)
            with transaction.atomic():
                # Holders of the shared lock reserve side by side: two of them could both pass a
                # quota check. With a quota, check and claim alone (see "Namespace quotas").
                _placement_lock(exclusive=quota is not None)
                deployment = _reserve(spec, plans, inventory.index.node_pk, user)
                if quota is not None:
                    _check_quota(spec.namespace)
                return deployment
        except (_Conflict, IntegrityError) as error:
            last_conflict = str(error)
        except OperationalError as error:
            if not _retryable(error):
                raise
            last_conflict = str(error)
        logger.info("placement of %s/%s conflicted (attempt %d): %s", spec.namespace, spec.name, attempt,
                    last_conflict)
    inventory = build_snapshot()
    # Raises NoCapacity when the capacity (or the namespace's quota) is simply gone.
    plans = decide(spec, inventory, scheduler, quota=namespace_quota(spec.namespace))
    message = (f"capacity kept changing while placing {spec.namespace}/{spec.name}: {MAX_ATTEMPTS} attempts "
               f"conflicted with other writers (last: {last_conflict}); try again")
    raise NoCapacity(message, plans[0].matrix if plans else {}, 0)


# ---- releasing ---------------------------------------------------------------------------------


def release_placements(placement_ids: Iterable[int]) -> int:
    """Give back every partition the placements hold; return how many were released.

    Exactly what was charged is subtracted: each partition's share and memory (a time-slice
    replica: its placement's memory). Weighted MPS shares are deleted (they exist only while
    held). Idempotent, and safe against a concurrent release: each row is released by a
    conditional update, and only rows this call released are subtracted. Must run in a transaction.
    """
    ids = list(placement_ids)
    if not ids:
        return 0
    held = list(
        Partition.objects.filter(placement_id__in=ids).order_by("gpu_id", "slot").values_list(
            "pk", "gpu_id", "kind", "share_milli", "memory_mib", "placement_id", "placement__memory_mib"
        )
    )
    _lock_gpus(row[1] for row in held)
    charges: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    released = 0
    for pk, gpu_pk, kind, share, memory, placement_id, placement_memory in held:
        rows = Partition.objects.filter(pk=pk, placement_id=placement_id)
        if kind == PartitionKind.MPS_WEIGHTED:
            done = rows.delete()[0] == 1
        else:
            done = rows.update(placement=None) == 1
        if done:
            released += 1
            charges[gpu_pk][0] += share
            charges[gpu_pk][1] += placement_memory if kind == PartitionKind.TIMESLICE else memory
    for gpu_pk, (milli, memory) in sorted(charges.items()):
        # Never below zero: inventory sync may have recomputed a counter in between.
        GPU.objects.filter(pk=gpu_pk).update(
            allocated_milli=Greatest(F("allocated_milli") - milli, Value(0)),
            allocated_memory_mib=Greatest(F("allocated_memory_mib") - memory, Value(0)),
        )
    return released


def _fail(deployment: Deployment, message: str, *, from_statuses: Iterable[str] = _ACTIVE) -> bool:
    """Mark an active deployment FAILED and release its placements; False if it was not active."""
    with transaction.atomic():
        claimed = Deployment.objects.filter(pk=deployment.pk, status__in=list(from_statuses)).update(
            status=DeploymentStatus.FAILED, message=message, updated_at=timezone.now()
        )
        if not claimed:
            return False
        placements = Placement.objects.filter(deployment_id=deployment.pk)
        release_placements(placements.values_list("pk", flat=True))
        placements.exclude(status=PlacementStatus.RELEASED).update(status=PlacementStatus.FAILED)
    deployment.refresh_from_db()
    return True


def _workload_names(deployment: Deployment) -> list[str]:
    names = deployment.placements.exclude(workload_name="").order_by("replica_index").values_list(
        "workload_name", flat=True)
    return list(dict.fromkeys(names))


def _delete_workloads(cluster: ClusterBackend, namespace: str, names: Iterable[str]) -> list[str]:
    """Delete workloads, ignoring ones already gone; return "name: error" for those that failed."""
    failures = []
    for name in names:
        try:
            cluster.delete_workload(namespace, name)
        except NotFound:
            continue
        except ClusterError as error:
            failures.append(f"{name}: {error}")
    return failures


# ---- the pipeline ------------------------------------------------------------------------------


def _enqueue_watch(deployment_id: int) -> None:
    """Start watching a placed deployment; never raises.

    The workloads exist and the GPUs are held whatever the broker says: a broker that is down
    must not turn a good deploy into an error (and a reservation nobody releases). Without the
    task, ``sweep_deployments`` watches it (from beat, every 30 s).
    """
    from scheduler.tasks import watch_deployment_task

    try:
        watch_deployment_task.apply_async((deployment_id,), countdown=settings.DEPLOYMENT_WATCH_INTERVAL_S)
    except Exception:  # any broker or transport error: kombu's, redis', a socket's
        logger.warning("could not enqueue the watch of deployment %s; the sweeper will watch it", deployment_id,
                       exc_info=True)


def deploy(spec: DeploySpec, *, user: Any = None, cluster: ClusterBackend | None = None) -> Deployment:
    """Validate, decide, reserve and execute a deploy request; return the PLACED deployment.

    Raises ``ValidationError`` (bad input; nothing stored), ``NoCapacity`` (nothing fits, or the
    namespace's quota is used up; nothing stored) or ``DeployFailed`` (the cluster refused a
    workload; the deployment is stored as FAILED and everything it reserved is released). Every
    replica is reserved in one transaction, all or nothing; once the workloads exist and the
    deployment is PLACED, ``scheduler.tasks.watch_deployment_task`` is enqueued (a failure to
    enqueue is logged, never raised: ``sweep_deployments`` is the safety net).
    """
    spec = validate_spec(spec)
    backend = cluster if cluster is not None else get_cluster()
    deployment = _decide_and_reserve(spec, user)
    _execute(deployment, backend)
    return deployment


def _execute(deployment: Deployment, cluster: ClusterBackend) -> None:
    """Create the deployment's workloads; on failure undo them and release (``DeployFailed``)."""
    placements = list(deployment.placements.select_related("node").order_by("replica_index"))
    decision_ids = dict(deployment.decisions.values_list("replica_index", "pk"))
    mig_starts = dict(
        Partition.objects.filter(placement__deployment=deployment, kind=PartitionKind.MIG).values_list(
            "placement_id", "mig_start")
    )
    specs = workload_specs(deployment, placements, decision_ids, mig_starts)
    # A create that failed may still have stored its workload (a read timeout after the API
    # server accepted it), so cleaning up deletes every name of the deployment, not only the
    # ones known to exist: deleting one that is not there is a NotFound, ignored.
    names = [spec.name for spec in specs]
    try:
        for spec in specs:
            cluster.create_workload(spec)
    except ClusterError as error:
        leftovers = _delete_workloads(cluster, deployment.namespace, names)
        message = f"the cluster refused workload {spec.name}: {error}; everything reserved was released"
        if leftovers:
            message += f" (could not remove {', '.join(leftovers)}; inventory sync will account for their pods)"
        _fail(deployment, message)
        raise DeployFailed(message, deployment) from error
    except BaseException:
        _delete_workloads(cluster, deployment.namespace, names)
        _fail(deployment, "placement aborted by an internal error; everything reserved was released")
        raise

    with transaction.atomic():
        placed = Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.PENDING).update(
            status=DeploymentStatus.PLACED, placed_at=timezone.now(), updated_at=timezone.now(),
            message=_placed_message(placements),
        )
        if placed:
            Placement.objects.filter(deployment_id=deployment.pk, status=PlacementStatus.RESERVED).update(
                status=PlacementStatus.BINDING)
    if not placed:
        # Deleted (or failed by the watch) while we were creating workloads: undo ours too.
        _delete_workloads(cluster, deployment.namespace, names)
        deployment.refresh_from_db()
        raise DeployFailed(f"{deployment} was {deployment.status} while its workloads were being created",
                           deployment)
    # Only now, with the workloads created and PLACED committed: an eager watch (tests, dev)
    # runs right here and must find them. Robust: a broken callback never fails the deploy.
    deployment_id = deployment.pk
    transaction.on_commit(lambda: _enqueue_watch(deployment_id), robust=True)
    deployment.refresh_from_db()


def _placed_message(placements: list[Placement]) -> str:
    nodes = sorted({p.node.name for p in placements if p.node_id is not None})
    handed = sum(1 for p in placements if p.node_id is None)
    parts = []
    if nodes:
        parts.append(f"placed on {', '.join(nodes)}")
    if handed:
        parts.append(f"{handed} replica(s) handed to the default Kubernetes scheduler")
    return "; ".join(parts) + "; waiting for the workloads to be ready"


def delete_deployment(deployment: Deployment, *, user: Any = None, cluster: ClusterBackend | None = None) -> None:
    """Delete a deployment's workloads, release every partition, and mark it DELETED.

    Idempotent (a DELETED deployment is left alone). Workloads already gone are fine; if the
    cluster refuses to delete one, ``ClusterError`` propagates and nothing is released (its
    pods may still hold the GPUs).
    """
    deployment.refresh_from_db()
    if deployment.status == DeploymentStatus.DELETED:
        return
    backend = cluster if cluster is not None else get_cluster()
    failures = _delete_workloads(backend, deployment.namespace, _workload_names(deployment))
    if failures:
        raise ClusterError(f"could not delete the workloads of {deployment}: {'; '.join(failures)}")
    who = f" by {user.get_username()}" if getattr(user, "is_authenticated", False) else ""
    with transaction.atomic():
        claimed = Deployment.objects.filter(pk=deployment.pk).exclude(status=DeploymentStatus.DELETED).update(
            status=DeploymentStatus.DELETED, message=f"deleted{who}", updated_at=timezone.now()
        )
        if claimed:
            placements = Placement.objects.filter(deployment_id=deployment.pk)
            release_placements(placements.values_list("pk", flat=True))
            placements.update(status=PlacementStatus.RELEASED)
    deployment.refresh_from_db()


WATCH_RUNNING, WATCH_WAITING, WATCH_FAILED, WATCH_GONE = "running", "waiting", "failed", "gone"


def watch_deployment(deployment_id: int, *, cluster: ClusterBackend | None = None,
                     now: datetime | None = None) -> str:
    """One look at a deployment being started; returns what the watcher should do next.

    - "running": every workload is ready; the deployment (PLACED -> RUNNING) and its placements
      are marked running.
    - "waiting": not ready yet and the timeout not reached; look again later.
    - "failed": not ready ``DEPLOYMENT_WATCH_TIMEOUT_S`` after placement (or never placed that
      long after creation, e.g. the deploying process died), or a workload vanished: its
      workloads are deleted, everything is released and it is FAILED.
    - "gone" / another status: nothing to do (deleted, failed, already running).
    ``ClusterError`` (other than a vanished workload) propagates, so the caller retries.
    Every look at a pending or placed deployment sets its ``watched_at`` to ``now`` (the
    sweeper leaves deployments looked at within the watch interval to their watch task).
    """
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return WATCH_GONE
    if deployment.status not in (DeploymentStatus.PENDING, DeploymentStatus.PLACED):
        return str(deployment.status)
    backend = cluster if cluster is not None else get_cluster()
    now = now or timezone.now()
    # Recorded before asking the cluster: an unreachable cluster was looked at too (the watch
    # task retries it on its own); update() leaves updated_at, the last status change, alone.
    Deployment.objects.filter(pk=deployment.pk).update(watched_at=now)
    timeout = timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    names = _workload_names(deployment)
    if deployment.status == DeploymentStatus.PLACED:
        try:
            ready = all(backend.workload_ready(deployment.namespace, name) for name in names)
        except NotFound as error:
            _delete_workloads(backend, deployment.namespace, names)
            _fail(deployment, f"a workload disappeared from the cluster ({error}); everything was released")
            return WATCH_FAILED
        if ready:
            with transaction.atomic():
                if Deployment.objects.filter(pk=deployment.pk, status=DeploymentStatus.PLACED).update(
                        status=DeploymentStatus.RUNNING, message="running", updated_at=timezone.now()):
                    Placement.objects.filter(deployment_id=deployment.pk, status=PlacementStatus.BINDING).update(
                        status=PlacementStatus.RUNNING)
            return WATCH_RUNNING
    started = deployment.placed_at or deployment.created_at
    if now - started < timeout:
        return WATCH_WAITING
    failures = _delete_workloads(backend, deployment.namespace, names)
    if failures:
        raise ClusterError(f"could not delete the workloads of {deployment}: {'; '.join(failures)}")
    what = "its workloads were not ready" if deployment.status == DeploymentStatus.PLACED else "it was never placed"
    _fail(deployment, f"{what} {settings.DEPLOYMENT_WATCH_TIMEOUT_S} s after placement; everything was released",
          from_statuses=[deployment.status])
    return WATCH_FAILED


WATCH_ERROR = "error"
SWEEP_BATCH = 200  # deployments one sweep looks at, stalest first; the next sweep takes the rest


def sweep_deployments(now: datetime | None = None, *, cluster: ClusterBackend | None = None,
                      limit: int = SWEEP_BATCH) -> dict[int, str]:
    """Watch every pending or placed deployment nobody has looked at for a watch interval.

    The safety net of the watch task: a watch that was never enqueued (the broker was down), or
    whose retries ran out, or whose worker died, still ends in RUNNING, or in FAILED with every
    GPU released after ``DEPLOYMENT_WATCH_TIMEOUT_S`` (``watch_deployment`` decides). "Nobody
    has looked" means ``watched_at`` (or, never watched, ``created_at``) is older than
    ``DEPLOYMENT_WATCH_INTERVAL_S`` before ``now``: deployments whose watch task is doing its
    job are left to it. At most ``limit``, stalest first. Returns deployment id -> the watch's
    outcome, "error" where the cluster failed (logged; the next sweep tries again).
    """
    now = now or timezone.now()
    stale_before = now - timedelta(seconds=settings.DEPLOYMENT_WATCH_INTERVAL_S)
    due = list(
        Deployment.objects.filter(status__in=(DeploymentStatus.PENDING, DeploymentStatus.PLACED))
        .annotate(last_look=Coalesce("watched_at", "created_at"))
        .filter(last_look__lte=stale_before)
        .order_by("last_look", "pk")
        .values_list("pk", flat=True)[:limit]
    )
    if not due:
        return {}
    backend = cluster if cluster is not None else get_cluster()
    outcomes = {}
    for deployment_id in due:
        try:
            outcomes[deployment_id] = watch_deployment(deployment_id, cluster=backend, now=now)
        except ClusterError as error:
            logger.warning("sweep: could not watch deployment %s: %s", deployment_id, error)
            outcomes[deployment_id] = WATCH_ERROR
    return outcomes


# ---- reading -----------------------------------------------------------------------------------


def placement_summary(placement: Placement) -> dict[str, Any]:
    """What the API and the UI show of a placement.

    ``{"node", "gpu_model", "gpus", "sharing", "share_percent", "mig_profile"}``: ``node`` and
    ``gpu_model`` are None and ``sharing`` is "default-scheduler" for a replica handed to the
    default Kubernetes scheduler; ``share_percent`` is the compute share per GPU (100.0 whole).
    """
    if placement.node_id is None:
        return {"node": None, "gpu_model": None, "gpus": [], "sharing": DecisionOutcome.DEFAULT_SCHEDULER.value,
                "share_percent": None, "mig_profile": ""}
    node = placement.node
    return {
        "node": node.name,
        "gpu_model": node.gpu_model or None,
        "gpus": list(placement.gpu_indexes or []),
        "sharing": placement.sharing,
        "share_percent": placement.share_milli * 100 / SHARE_MILLI_FULL,
        "mig_profile": placement.mig_profile,
    }


__all__ = [
    "DeployFailed",
    "DeploySpec",
    "NoCapacity",
    "decide",
    "delete_deployment",
    "deploy",
    "label_errors",
    "placement_scheduler",
    "placement_summary",
    "release_placements",
    "sweep_deployments",
    "validate_spec",
    "watch_deployment",
]
