"""The deploy pipeline (docs/design.md section 3): validate, place every replica, watch; and delete.

Views, API and tasks call these functions and hold no logic of their own. ``deploy`` places
every replica of a new deployment through ``placing.place_replicas`` (decide, reserve all or
nothing, create the workloads, enqueue the watch); ``delete_deployment`` deletes its workloads
and releases every replica. Every change of state is an audit event.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from gpuplane.observability import PLACEMENT_DECISION_SECONDS
from lifecycle.audit import actor_name
from lifecycle.transitions import transition
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment, Placement
from scheduler.services.execution import delete_workloads, workload_names
from scheduler.services.placing import place_replicas, release_all
from scheduler.services.spec import DeploySpec, validate_spec
from scheduler.services.watching import watch_runs_inline


def deploy(spec: DeploySpec, *, user: Any = None, cluster: ClusterBackend | None = None,
           nodes: Iterable[str] | None = None) -> Deployment:
    """Validate, decide, reserve and execute a deploy request; return the PLACED deployment.

    Raises ``ValidationError`` (bad input; nothing stored), ``NoCapacity`` (nothing fits, or the
    namespace's quota is used up; nothing stored) or ``DeployFailed`` (the cluster refused a
    workload; the deployment is stored as FAILED and everything it reserved is released). Every
    replica is reserved in one transaction, all or nothing; once the workloads exist and the
    deployment is PLACED, ``scheduler.tasks.watch_deployment_task`` is enqueued (a failure to
    enqueue is logged, never raised: ``sweep_deployments`` is the safety net). The whole call, from
    validation to the cluster's answer, is one observation of ``PLACEMENT_DECISION_SECONDS``: what
    the user waits for, not only the placement core's share of it. ``nodes`` limits the decision
    to those node names (the demo's seed steers its deployments; None: every node).
    """
    from scheduler.services.preemption import with_preemption  # preemption places through deploy, too

    with PLACEMENT_DECISION_SECONDS.time():
        return with_preemption(spec, lambda: _deploy(spec, user=user, cluster=cluster, nodes=nodes), user=user,
                               cluster=cluster)


def _deploy(spec: DeploySpec, *, user: Any, cluster: ClusterBackend | None,
            nodes: Iterable[str] | None = None) -> Deployment:
    spec = validate_spec(spec)
    deployment = Deployment(
        name=spec.name, model=spec.model, memory_mib=spec.memory_mib, gpu_count=spec.gpu_count,
        replicas=spec.replicas, workload_type=spec.workload_type, priority=spec.priority,
        latency_slo_ms=spec.latency_slo_ms, namespace=spec.namespace, labels=dict(spec.labels),
        sharing=spec.sharing, share_percent=spec.share_percent, enable_gpu_selection=spec.enable_gpu_selection,
        cpu_milli=spec.cpu_milli, host_memory_mib=spec.host_memory_mib,
        image=spec.image, command=list(spec.command), args=list(spec.args), env=dict(spec.env),
        status=DeploymentStatus.PENDING,
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    placements = place_replicas(deployment, range(spec.replicas), spec=spec, user=user, cluster=cluster,
                                timed=False, nodes=nodes)
    if not watch_runs_inline():
        # Nothing moved them on since they were written (an eager watch may have): the caller can
        # answer with ``deployment.placements.all()`` without reading them again.
        prefetched = Placement.objects.filter(deployment=deployment)
        prefetched._result_cache = placements  # what prefetch_related stores
        prefetched._prefetch_done = True
        deployment._prefetched_objects_cache = {"placements": prefetched}
    return deployment


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
    failures = delete_workloads(backend, deployment.namespace, workload_names(deployment))
    if failures:
        raise ClusterError(f"could not delete the workloads of {deployment}: {'; '.join(failures)}")
    who = f" by {user.get_username()}" if getattr(user, "is_authenticated", False) else ""
    others = [status for status in DeploymentStatus.values() if status != DeploymentStatus.DELETED]
    with transaction.atomic():
        if transition(Deployment, deployment.pk, others, DeploymentStatus.DELETED, actor=actor_name(user),
                      reason=f"deleted{who}", values={"message": f"deleted{who}"}):
            release_all(deployment, user=user, reason=f"deleted{who}")
    deployment.refresh_from_db()
