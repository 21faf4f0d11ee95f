"""Admission: pods created by anyone get gpuplane's sharing and node (``POST /webhooks/mutate-pods``).

``review(body)`` turns an AdmissionReview v1 into its answer and never raises: same uid,
``allowed: true`` and a base64 JSON Patch (``scheduler.pod_patch``), or no patch when the pod is
left alone; a namespace over its quota is the one refusal (``allowed: false``, code 409, the
reason). Any internal error admits the pod unchanged, is logged and counted
(``gpuplane_webhook_reviews_total{result="error"}``): the webhook fails open, like its
``failurePolicy: Ignore``.

A pod to place becomes a Deployment of origin ``webhook`` with one replica, decided and reserved
by the same services as an API deploy (``placing.admit_replica``: snapshot, placement engine,
quota, partition claims, decision matrix, audit), but no workload is created: the pod itself is
it. The pod is labelled ``gpuplane.io/deployment=<id>``; ``watch_admitted`` marks it running once
a pod with that label is bound, and releases it when the pod goes away, or when none binds within
``GPUPLANE_WEBHOOK_BIND_TIMEOUT_S`` (kube-scheduler's assumed-pod expiry: a pod the API server
never stored after our answer, a later webhook refused, or nobody scheduled). A ``dryRun``
request, and ``dry_run`` (the page and API), decide on the same snapshot and reserve nothing.
"""
from __future__ import annotations

import base64
import copy
import json
import logging
import re
import time
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from gpuplane.observability import WEBHOOK_REVIEW_SECONDS, WEBHOOK_REVIEWS
from nodes import quantities
from nodes.catalog import CATALOG
from nodes.cluster.parsing import pod_gpu_requests, pod_host_requests
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_DECISIONS,
    ANNOTATION_MEMORY_MIB,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARE_MILLI,
    ANNOTATION_SHARING,
    ENV_MPS_MEMORY_LIMIT,
    GPUPLANE_PREFIX,
    LABEL_DEPLOYMENT,
    LABEL_HOSTNAME,
    PRIORITY_CLASS_PREFIX,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)
from nodes.models import Node, Partition
from nodes.vocabulary import MIB_PER_GB, PartitionKind, SharingMode
from scheduler.adapters import build_snapshot, namespace_quota
from scheduler.choices import DeploymentStatus
from scheduler.core.admission import (
    ClusterFacts,
    MIGRoom,
    PodFacts,
    PolicyRule,
    SharingChoice,
    choose_sharing,
    opt_out,
)
from scheduler.core.types import Assignment, Priority, SharingRequest
from scheduler.models import AdmissionSettings, Deployment, SharingPolicy
from scheduler.pod_patch import ANNOTATION_ADMISSION, PodChange, pod_patch
from scheduler.policies import policy_rule
from scheduler.services.admitted import ORIGIN_WEBHOOK
from scheduler.services.admitting import admit_replica
from scheduler.services.deciding import decide, placement_scheduler
from scheduler.services.errors import NoCapacity
from scheduler.services.preemption import with_preemption
from scheduler.services.spec import DeploySpec

logger = logging.getLogger(__name__)

ANNOTATION_GPU_MEMORY = f"{GPUPLANE_PREFIX}/gpu-memory"  # pod: the GPU memory it needs, a quantity ("16Gi")
ANNOTATION_UTILIZATION = f"{GPUPLANE_PREFIX}/utilization-pct"  # pod: observed, for time-slicing replicas
ANNOTATION_BURSTINESS = f"{GPUPLANE_PREFIX}/burstiness-pct"
DEFAULT_GPU_MEMORY_MIB = MIB_PER_GB  # a pod that states none: sized by its partition's own rule
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")


class QuotaRefused(Exception):
    """The namespace's quota refuses the pod (answered 409, the one denial)."""


@dataclass
class Verdict:
    """What the webhook answers for one pod, and what it shows the dry run."""

    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    code: int = 200
    choice: SharingChoice | None = None
    matrix: dict[str, Any] = field(default_factory=dict)
    deployment_id: int | None = None
    result: str = "left-alone"  # the metrics label: left-alone, placed, unplaced, refused, error

    def to_dict(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "result": self.result, "message": self.message,
                "choice": self.choice.to_dict() if self.choice else None, "patch": self.patch,
                "matrix": self.matrix, "deployment": self.deployment_id}


# ---- the AdmissionReview ---------------------------------------------------------------------------


def review(body: bytes) -> dict[str, Any]:
    """The AdmissionReview answer to ``body``; never raises (a body without a uid gets uid "")."""
    started = time.perf_counter()
    uid = ""
    try:
        document = json.loads(body)
        request = document.get("request") if isinstance(document, dict) else None
        if not isinstance(request, dict):
            raise ValueError("no request in the AdmissionReview")
        uid = str(request["uid"]) if isinstance(request.get("uid"), str) else ""
        verdict = admit(request)
    except Exception:
        logger.exception("admission review failed; the pod is admitted unchanged (fail open)")
        verdict = Verdict(result="error", message="gpuplane could not decide; admitted unchanged")
    WEBHOOK_REVIEWS.labels(result=verdict.result).inc()
    WEBHOOK_REVIEW_SECONDS.labels(result=verdict.result).observe(time.perf_counter() - started)
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch, separators=(",", ":")).encode()).decode()
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "reason": "Conflict", "message": verdict.message}
    elif verdict.message:
        response["warnings"] = [verdict.message[:500]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def admit(request: dict[str, Any]) -> Verdict:
    """The verdict on one AdmissionReview request (a pod CREATE)."""
    pod = request.get("object")
    if request.get("operation", "CREATE") != "CREATE" or not isinstance(pod, dict) or pod.get("kind", "Pod") != "Pod":
        return Verdict(message="")
    namespace = request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "default"
    return decide_pod(pod, str(namespace), dry_run=bool(request.get("dryRun")))


def decide_pod(pod: dict[str, Any], namespace: str, *, dry_run: bool) -> Verdict:
    """Decide, and unless ``dry_run`` reserve, one pod; the verdict carries the patch."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        return Verdict(message="the pod's annotations are not an object; left alone")
    if ANNOTATION_ADMISSION in annotations:
        return Verdict()  # our own output, reinvoked: nothing to add
    gpu_requests = pod_gpu_requests(pod)
    if not gpu_requests:
        return Verdict()
    facts = pod_facts(pod, namespace, gpu_requests)
    early = opt_out(facts, exempt_namespaces())
    if early is not None and not early.places:
        return Verdict(choice=early, message=early.reason)  # no query at all for a pod left alone
    choice = choose_sharing(facts, policy_rules(), cluster_facts(facts))
    if not choice.places:
        return Verdict(choice=choice, message=choice.reason)
    spec = deploy_spec(pod, facts, choice)
    try:
        if dry_run:
            assignment, matrix, deployment_id, decision_id = _decide_only(spec)
        else:
            assignment, matrix, deployment_id, decision_id = _reserve(spec, pod, choice)
    except NoCapacity as error:
        if "quota" in error.message:
            return Verdict(allowed=False, code=409, message=error.message, choice=choice, matrix=error.decision,
                           result="refused")
        change = PodChange(annotations={ANNOTATION_ADMISSION: f"unplaced: {error.message}"})
        return Verdict(patch=pod_patch(pod, change), message=error.message, choice=choice, matrix=error.decision,
                       result="unplaced")
    change = pod_change(assignment, choice, deployment_id, decision_id)
    return Verdict(patch=pod_patch(pod, change), message=f"placed on {assignment.node}: {choice.reason}",
                   choice=choice, matrix=matrix, deployment_id=deployment_id, result="placed")


def policy_rules() -> list[PolicyRule]:
    """The enabled sharing policies, as the admission flow takes them."""
    return [policy_rule(p) for p in SharingPolicy.objects.filter(enabled=True)]


# ---- reading the pod ----------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def pod_facts(pod: dict[str, Any], namespace: str, gpu_requests: dict[str, int]) -> PodFacts:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    mig = [key[len(RESOURCE_MIG_PREFIX):] for key in gpu_requests if key.startswith(RESOURCE_MIG_PREFIX)]
    memory = annotations.get(ANNOTATION_GPU_MEMORY)
    try:
        gpu_memory_mib = quantities.memory_mib(memory) if memory else None
    except (ValueError, ArithmeticError):
        gpu_memory_mib = None
    selector: dict[str, Any] = spec["nodeSelector"] if isinstance(spec.get("nodeSelector"), dict) else {}
    return PodFacts(
        namespace=namespace, labels=labels, annotations=annotations,
        gpu_count=max(gpu_requests.get(RESOURCE_GPU, 0), 1 if mig else 0, 1),
        gpu_memory_mib=gpu_memory_mib, host_memory_mib=pod_host_requests(pod)[1],
        mig_profile=mig[0] if mig else "",
        pinned_node=str(spec.get("nodeName") or selector.get(LABEL_HOSTNAME) or ""),
        utilization_pct=_number(annotations.get(ANNOTATION_UTILIZATION)),
        burstiness_pct=_number(annotations.get(ANNOTATION_BURSTINESS)),
    )


_EXEMPT: tuple[float, frozenset[str]] = (0.0, frozenset())
EXEMPT_CACHE_S = 5.0  # an admin's edit of the exempt namespaces reaches every process within this


def exempt_namespaces() -> frozenset[str]:
    """The admins' exempt namespaces plus kube-system and gpuplane's own, read at most every
    ``EXEMPT_CACHE_S`` per process (the webhook's manifest excludes the last two already)."""
    global _EXEMPT
    read_at, exempt = _EXEMPT
    now = time.monotonic()
    if now - read_at > EXEMPT_CACHE_S or not exempt:
        listed = AdmissionSettings.objects.filter(pk=1).values_list("exempt_namespaces", flat=True).first() or []
        exempt = frozenset([*listed, getattr(settings, "GPUPLANE_NAMESPACE", "") or "gpuplane", "kube-system"])
        _EXEMPT = (now, exempt)
    return exempt


def forget_exempt_namespaces() -> None:
    """Read the exempt namespaces again on the next review (after an edit, and between tests)."""
    global _EXEMPT
    _EXEMPT = (0.0, frozenset())


def cluster_facts(pod: PodFacts) -> ClusterFacts:
    """Exempt namespaces, free MIG instances and the pinned node's facts, in at most three queries."""
    exempt = exempt_namespaces()
    room = tuple(MIGRoom(profile, memory) for profile, memory in
                 Partition.objects.filter(kind=PartitionKind.MIG, hold__isnull=True, pod="",
                                          gpu__node__ready=True, gpu__node__cordoned=False)
                 .values_list("mig_profile", "memory_mib").distinct())
    mode: SharingMode | None = None
    capability = None
    if pod.pinned_node:
        node = Node.objects.filter(name=pod.pinned_node).values_list("sharing_mode", "gpu_model").first()
        if node is not None:
            mode = SharingMode(node[0])
            model = CATALOG.get(node[1])
            capability = model.compute_capability if model else None
    return ClusterFacts(exempt_namespaces=exempt, mig_room=room, pinned_mode=mode,
                        pinned_compute_capability=capability)


def _name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    raw = str(meta.get("name") or meta.get("generateName") or "pod").lower()
    name = _DNS_LABEL.sub("-", raw).strip("-")[:63].strip("-")
    return name or "pod"


def _priority(pod: dict[str, Any]) -> Priority:
    name = str((pod.get("spec") or {}).get("priorityClassName") or "")
    value = name[len(PRIORITY_CLASS_PREFIX):] if name.startswith(PRIORITY_CLASS_PREFIX) else ""
    return Priority(value) if value in Priority.values() else Priority.MEDIUM


def deploy_spec(pod: dict[str, Any], facts: PodFacts, choice: SharingChoice) -> DeploySpec:
    """The deploy request a pod amounts to: one replica, its GPUs, memory and host requests."""
    memory_mib = facts.gpu_memory_mib or DEFAULT_GPU_MEMORY_MIB
    if choice.sharing == SharingRequest.MIG and choice.mig_profile:
        sized = [p.memory_mib for m in CATALOG.values() for p in m.mig_profiles if p.name == choice.mig_profile]
        if sized and not facts.gpu_memory_mib:
            memory_mib = min(sized)  # a profile named without a stated need: sized to the profile
    cpu_milli, host_mib = pod_host_requests(pod)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    image = str(containers[0].get("image") or "pod") if isinstance(containers[0], dict) else "pod"
    return DeploySpec(
        name=_name(pod), model=image[:200], memory_gb=memory_mib / MIB_PER_GB,
        gpu_count=facts.gpu_count, workload_type=facts.workload_type or "inference",
        priority=_priority(pod), namespace=facts.namespace, sharing=choice.sharing,
        allow_default_scheduler=False, cpu=f"{max(cpu_milli, 1)}m", memory=f"{max(host_mib, 1)}Mi",
    )


# ---- deciding and reserving -------------------------------------------------------------------------


def _decide_only(spec: DeploySpec) -> tuple[Assignment, dict[str, Any], None, None]:
    plans = decide(spec, build_snapshot(), placement_scheduler(), quota=namespace_quota(spec.namespace),
                   replica_indexes=[0])
    plan = plans[0]
    if plan.decision.assignment is None:
        raise NoCapacity(plan.message, plan.matrix)
    return plan.decision.assignment, plan.matrix, None, None


def _reserve(spec: DeploySpec, pod: dict[str, Any], choice: SharingChoice
             ) -> tuple[Assignment, dict[str, Any], int, int]:
    deployment = Deployment(
        name=spec.name, model=spec.model, memory_mib=spec.memory_mib, gpu_count=spec.gpu_count, replicas=1,
        workload_type=spec.workload_type, priority=spec.priority, namespace=spec.namespace,
        sharing=spec.sharing, cpu_milli=spec.cpu_milli, host_memory_mib=spec.host_memory_mib,
        origin=ORIGIN_WEBHOOK, status=DeploymentStatus.PENDING, message=choice.reason,
    )
    def attempt() -> tuple[Any, int]:
        fresh = copy.copy(deployment)  # a failed attempt leaves nothing behind, the row included
        plan, decision_id = admit_replica(fresh, spec, reason=f"admission webhook: {choice.reason}")
        deployment.pk = fresh.pk
        return plan, decision_id

    plan, decision_id = with_preemption(spec, attempt)
    assert plan.decision.assignment is not None
    return plan.decision.assignment, plan.matrix, deployment.pk, decision_id


def pod_change(assignment: Assignment, choice: SharingChoice, deployment_id: int | None,
               decision_id: int | None) -> PodChange:
    first = assignment.partitions[0]
    env = dict(assignment.env)
    if choice.sharing == SharingRequest.MPS and choice.mps_memory_limit_mib:
        env[ENV_MPS_MEMORY_LIMIT] = f"0={choice.mps_memory_limit_mib}M"
    annotations = {
        ANNOTATION_ADMISSION: f"placed on {assignment.node}: {choice.reason}",
        ANNOTATION_SHARING: str(assignment.kind),
        ANNOTATION_ASSIGNED_GPUS: ",".join(str(i) for i in assignment.gpu_indexes),
    }
    if decision_id is not None:
        annotations[ANNOTATION_DECISIONS] = str(decision_id)
    if first.kind == PartitionKind.MIG and first.mig_start is not None:
        annotations[ANNOTATION_MIG_START] = str(first.mig_start)
    if first.kind == PartitionKind.MPS_WEIGHTED:
        annotations[ANNOTATION_SHARE_MILLI] = str(first.share_milli)
    if first.kind in (PartitionKind.MPS_WEIGHTED, PartitionKind.TIMESLICE):
        annotations[ANNOTATION_MEMORY_MIB] = str(first.memory_mib)
    labels = {LABEL_DEPLOYMENT: str(deployment_id)} if deployment_id is not None else {}
    return PodChange(node=assignment.node, resources={k: int(v) for k, v in assignment.resources.items()},
                     env=env, labels=labels, annotations=annotations)


def dry_run(obj: dict[str, Any]) -> dict[str, Any]:
    """The decision, matrix and patch for a pasted Pod (or InferenceService); nothing is stored.
    Like the webhook it never fails: what it cannot read is answered as result "error"."""
    try:
        if obj.get("kind") == "InferenceService":
            from scheduler.inference_services import engine_pod

            obj = engine_pod(obj)
        meta = obj.get("metadata")
        namespace = str((meta if isinstance(meta, dict) else {}).get("namespace") or "default")
        verdict = decide_pod(obj, namespace, dry_run=True)
    except Exception as error:  # a pasted object may be anything; say what went wrong
        logger.info("dry run could not decide", exc_info=True)
        return Verdict(result="error", message=f"gpuplane could not read this object: {error!r}").to_dict()
    if verdict.result == "left-alone" and verdict.choice is None and not verdict.message:
        verdict = replace(verdict, message="the pod asks for no nvidia.com/* resource (or was admitted already): "
                                           "the webhook never sees it or leaves it alone")
    return verdict.to_dict()
