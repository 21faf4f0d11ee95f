"""Placements -> the Kubernetes workloads that run them (``WorkloadSpec``; docs/design.md section 3).

One workload per target node: the replicas a deployment has on one node share a Kubernetes
Deployment pinned to that node by required node affinity (``nodes.cluster.manifests``), with
``replicas`` set to their number. Replicas on one node whose pods would differ (a MIG replica
given a larger instance than its sibling) get a workload each, since one pod template cannot ask
for both. Replicas handed to the default scheduler share one unpinned workload.

``inference_service_manifest`` renders the same workload as an OME ``InferenceService`` instead
(a Jinja2 template). Each pod requests its CPU and memory (requests = limits) and the right extended resource (``nvidia.com/gpu`` or ``nvidia.com/mig-<profile>``),
carries the MPS limits of its assignment as environment variables, the priority class
``gpuplane-<priority>``, the labels ``app.kubernetes.io/managed-by=gpuplane`` and
``gpuplane.io/deployment=<id>``, and annotations that name its decisions and sharing mode and
let inventory sync map it back to its partitions should its placement rows ever be gone
(``gpuplane.io/gpus``, ``gpuplane.io/share-milli``, ``gpuplane.io/mig-start``,
``gpuplane.io/memory-mib``). Per-pod annotations (GPU indexes, MIG start) are only written for a
workload of one replica: a pod template cannot give its pods different values.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from django.conf import settings

from nodes.cluster.base import WorkloadSpec
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_DECISIONS,
    ANNOTATION_MEMORY_MIB,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARE_MILLI,
    ANNOTATION_SHARING,
    ENV_MODEL_NAME,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED_BY,
    MANAGED_BY_GPUPLANE,
    PRIORITY_CLASS_PREFIX,
    RESOURCE_GPU,
    SHARING_DEFAULT_SCHEDULER,
)
from nodes.quantities import format_cpu, format_memory
from nodes.vocabulary import PartitionKind
from scheduler.models import Deployment, Placement

MAX_NAME_LENGTH = 63  # a label value (app.kubernetes.io/name carries the workload name)


@dataclass(frozen=True)
class WorkloadGroup:
    """Placements that run as one Kubernetes workload."""

    name: str
    placements: tuple[Placement, ...]

    @property
    def node_name(self) -> str | None:
        """The node its pods are pinned to; None for replicas handed to the default scheduler."""
        first = self.placements[0]
        return first.node.name if first.node_id is not None else None


def _template_key(placement: Placement) -> tuple[Any, ...]:
    return (
        placement.node_id,
        placement.sharing,
        placement.share_milli,
        placement.memory_mib,
        placement.mig_profile,
        tuple(sorted((placement.resources or {}).items())),
        tuple(sorted((placement.env or {}).items())),
    )


def workload_name(deployment: Deployment, ordinal: int, count: int) -> str:
    """``<name>-<id>`` for a deployment's only workload, ``<name>-<id>-<ordinal>`` otherwise.

    The id keeps two deployments of one name apart; the name part is shortened so the whole
    stays a 63-character DNS label.
    """
    suffix = f"-{deployment.pk}" if count == 1 else f"-{deployment.pk}-{ordinal}"
    head = deployment.name[: MAX_NAME_LENGTH - len(suffix)].rstrip("-")
    return f"{head}{suffix}"


def added_workload_name(deployment: Deployment, first_replica_index: int) -> str:
    """``<name>-<id>-r<index>``: a workload for replicas added to a running deployment.

    The ``r`` keeps it apart from the ordinals of the deployment's first workloads.
    """
    suffix = f"-{deployment.pk}-r{first_replica_index}"
    head = deployment.name[: MAX_NAME_LENGTH - len(suffix)].rstrip("-")
    return f"{head}{suffix}"


def group_placements(deployment: Deployment, placements: Sequence[Placement], *,
                     added: bool = False) -> list[WorkloadGroup]:
    """Group placements into workloads (one per node and pod template), named.

    Groups are ordered by their first replica; ``deployment.pk`` must be set. ``added``: the
    placements join a deployment that already has workloads, so each group is named after its
    first replica (``added_workload_name``) and never reuses a name.
    """
    groups: dict[tuple[Any, ...], list[Placement]] = {}
    for placement in sorted(placements, key=lambda p: p.replica_index):
        groups.setdefault(_template_key(placement), []).append(placement)
    count = len(groups)
    return [
        WorkloadGroup(
            name=(added_workload_name(deployment, members[0].replica_index) if added
                  else workload_name(deployment, ordinal, count)),
            placements=tuple(members),
        )
        for ordinal, members in enumerate(groups.values())
    ]


def stored_groups(placements: Sequence[Placement]) -> list[WorkloadGroup]:
    """Placements grouped by the workload name stored on them, in the order of their first replica."""
    groups: dict[str, list[Placement]] = {}
    for placement in sorted(placements, key=lambda p: p.replica_index):
        groups.setdefault(placement.workload_name, []).append(placement)
    return [WorkloadGroup(name=name, placements=tuple(members)) for name, members in groups.items()]


def workload_spec(deployment: Deployment, group: WorkloadGroup, decision_ids: Mapping[int, int],
                  mig_starts: Mapping[int, int | None] | None = None) -> WorkloadSpec:
    """The ``WorkloadSpec`` of one group.

    ``decision_ids`` maps replica index -> Decision id; ``mig_starts`` maps placement id -> the
    MIG start of its instance (for the ``gpuplane.io/mig-start`` annotation).
    """
    first = group.placements[0]
    single = len(group.placements) == 1
    handed_over = first.node_id is None
    sharing = SHARING_DEFAULT_SCHEDULER if handed_over else first.sharing
    annotations = {
        ANNOTATION_DECISIONS: ",".join(
            str(decision_ids[p.replica_index]) for p in group.placements if p.replica_index in decision_ids
        ),
        ANNOTATION_SHARING: sharing,
    }
    if not handed_over:
        if single:
            annotations[ANNOTATION_ASSIGNED_GPUS] = ",".join(str(i) for i in first.gpu_indexes)
            start = (mig_starts or {}).get(first.pk)
            if first.sharing == PartitionKind.MIG and start is not None:
                annotations[ANNOTATION_MIG_START] = str(start)
        if first.sharing == PartitionKind.MPS_WEIGHTED:
            annotations[ANNOTATION_SHARE_MILLI] = str(first.share_milli)
        if first.sharing in (PartitionKind.MPS_WEIGHTED, PartitionKind.TIMESLICE):
            annotations[ANNOTATION_MEMORY_MIB] = str(first.memory_mib)
    resources = dict(first.resources or {}) or {RESOURCE_GPU: deployment.gpu_count}
    labels = {
        **(deployment.labels or {}),
        LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE,
        LABEL_DEPLOYMENT: str(deployment.pk),
    }
    return WorkloadSpec(
        namespace=deployment.namespace,
        name=group.name,
        node_name=group.node_name,
        image=deployment.image or settings.GPUPLANE_WORKLOAD_IMAGE,
        command=[str(arg) for arg in deployment.command or []],
        args=[str(arg) for arg in deployment.args or []],
        replicas=len(group.placements),
        resources={key: int(value) for key, value in resources.items()},
        host_requests=host_requests(deployment),
        # The request's variables, then gpuplane's (which validation keeps it from naming).
        env={
            **{str(k): str(v) for k, v in (deployment.env or {}).items()},
            ENV_MODEL_NAME: deployment.model,
            **{str(k): str(v) for k, v in (first.env or {}).items()},
        },
        labels=labels,
        annotations=annotations,
        priority_class_name=f"{PRIORITY_CLASS_PREFIX}{deployment.priority}",
    )


def host_requests(deployment: Deployment) -> dict[str, str]:
    """The pod's CPU and memory as Kubernetes quantities (requests = limits); none stated, none."""
    requests = {}
    if deployment.cpu_milli:
        requests["cpu"] = format_cpu(deployment.cpu_milli)
    if deployment.host_memory_mib:
        requests["memory"] = format_memory(deployment.host_memory_mib)
    return requests


def workload_specs(deployment: Deployment, placements: Sequence[Placement], decision_ids: Mapping[int, int],
                   mig_starts: Mapping[int, int | None] | None = None) -> list[WorkloadSpec]:
    """The workloads that run ``placements`` (grouped by their stored workload names), in replica order."""
    return [workload_spec(deployment, group, decision_ids, mig_starts) for group in stored_groups(placements)]


# OME's InferenceService (ome.io/v1beta1), the alternative target to a plain Deployment: the model
# is served by the runtime OME picks (or the one named), its engine pinned and sized like the
# workload. Every value goes through `tojson` (JSON is YAML), so no value can change the shape.
INFERENCE_SERVICE_TEMPLATE = """\
apiVersion: ome.io/v1beta1
kind: InferenceService
metadata:
  name: {{ spec.name | tojson }}
  namespace: {{ spec.namespace | tojson }}
  labels: {{ labels | tojson }}
  annotations: {{ spec.annotations | tojson }}
spec:
  model:
    name: {{ model | tojson }}
{%- if runtime %}
  runtime:
    name: {{ runtime | tojson }}
{%- endif %}
  engine:
    minReplicas: {{ spec.replicas | int }}
    maxReplicas: {{ spec.replicas | int }}
{%- if spec.priority_class_name %}
    priorityClassName: {{ spec.priority_class_name | tojson }}
{%- endif %}
{%- if spec.node_name %}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions:
            - key: kubernetes.io/hostname
              operator: In
              values: [{{ spec.node_name | tojson }}]
{%- endif %}
    runner:
      resources:
{%- if requests %}
        requests: {{ requests | tojson }}
{%- endif %}
        limits: {{ limits | tojson }}
      env: {{ env | tojson }}
"""


def inference_service_manifest(spec: WorkloadSpec, model: str, runtime: str = "") -> dict[str, Any]:
    """The OME ``InferenceService`` equivalent of ``spec`` (rendered from ``INFERENCE_SERVICE_TEMPLATE``).

    ``model`` names the (Cluster)BaseModel to serve, ``runtime`` the (Cluster)ServingRuntime
    ("" lets OME choose). Same pinning, resources, MPS env, priority class, labels and
    annotations as the Deployment gpuplane would create. Needs Jinja2 (imported here, so the rest
    of gpuplane runs without it).
    """
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    text = environment.from_string(INFERENCE_SERVICE_TEMPLATE).render(
        spec=spec,
        model=model,
        runtime=runtime,
        labels={LABEL_MANAGED_BY: MANAGED_BY_GPUPLANE, **spec.labels},
        requests=dict(spec.host_requests),
        limits={**spec.host_requests, **{key: str(value) for key, value in spec.resources.items()}},
        env=[{"name": key, "value": value} for key, value in sorted(spec.env.items())],
    )
    return yaml.safe_load(text)


__all__ = [
    "INFERENCE_SERVICE_TEMPLATE",
    "inference_service_manifest",
    "WorkloadGroup",
    "added_workload_name",
    "group_placements",
    "host_requests",
    "stored_groups",
    "workload_name",
    "workload_spec",
    "workload_specs",
]
