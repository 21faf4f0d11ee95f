"""scheduler.services: deploy validates, decides, reserves and executes every replica, and the OME
InferenceService alternative (on the demo cluster).
"""
from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from nodes.cluster.manifests import pinned_node
from nodes.models import GPU, Partition
from nodes.vocabulary import PartitionKind
from scheduler import services, workloads
from scheduler.choices import DecisionOutcome, DeploymentStatus, PlacementStatus
from scheduler.models import Decision, Deployment, Placement
from scheduler.services import NoCapacity
from tests.scheduler.inventory import capacity_state, check_invariants
from tests.scheduler.services.specs import spec, workload

pytestmark = pytest.mark.django_db


# ---- deploy ------------------------------------------------------------------------------------


def test_it_places_reserves_and_creates_one_pinned_workload(cluster):
    deployment = services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    assert deployment.status == DeploymentStatus.PLACED
    (placement,) = deployment.placements.all()
    assert placement.status == PlacementStatus.BINDING
    assert placement.sharing == PartitionKind.EXCLUSIVE and placement.node.gpu_model.startswith("H100")
    (held,) = Partition.objects.filter(hold__placement=placement)
    assert held.gpu.index == placement.gpu_indexes[0]
    gpu = GPU.objects.get(pk=held.gpu_id)
    assert (gpu.allocated_milli, gpu.allocated_memory_mib) == (1000, gpu.memory_mib)

    manifest = workload(cluster, placement.workload_name)
    pod = manifest["spec"]["template"]
    assert pinned_node(manifest) == placement.node.name
    container = pod["spec"]["containers"][0]
    # The inference workload type's default host requests, requested and limited alike.
    assert container["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    assert pod["spec"]["priorityClassName"] == "gpuplane-high"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplane"
    assert pod["metadata"]["labels"]["gpuplane.io/deployment"] == str(deployment.pk)
    annotations = pod["metadata"]["annotations"]
    decision = Decision.objects.get(deployment=deployment)
    assert annotations["gpuplane.io/decisions"] == str(decision.pk)
    assert annotations["gpuplane.io/sharing"] == "exclusive"
    assert annotations["gpuplane.io/gpus"] == str(placement.gpu_indexes[0])
    assert {"name": "MODEL_NAME", "value": "llama-3-8b"} in container["env"]
    check_invariants()


def test_it_stores_the_decision_matrix_of_every_replica(cluster):
    deployment = services.deploy(spec(replicas=3), cluster=cluster)

    decisions = list(deployment.decisions.order_by("replica_index"))
    assert [d.replica_index for d in decisions] == [0, 1, 2]
    for decision, placement in zip(decisions, deployment.placements.order_by("replica_index"), strict=True):
        assert decision.outcome == DecisionOutcome.PLACED
        assert decision.node_id == placement.node_id
        assert decision.matrix["node"] == placement.node.name
        assert decision.matrix["profile"] == "balanced" == decision.profile
        assert decision.weights == decision.matrix["weights"]
        assert len(decision.matrix["rows"]) == 12  # a small cluster keeps every node
        assert decision.duration_ms > 0


def test_mps_replicas_get_their_env_and_share_a_workload_per_node(cluster):
    deployment = services.deploy(spec(name="emb", priority="low", workload_type="batch", replicas=3), cluster=cluster)

    placements = list(deployment.placements.order_by("replica_index"))
    assert {p.sharing for p in placements} <= {"mps", "mps-weighted"}
    assert all(p.share_milli == 500 for p in placements)
    by_workload: dict[str, list[Placement]] = {}
    for placement in placements:
        by_workload.setdefault(placement.workload_name, []).append(placement)
    for name, members in by_workload.items():
        manifest = workload(cluster, name)
        assert manifest["spec"]["replicas"] == len(members)
        assert pinned_node(manifest) == members[0].node.name
        assert len({p.node_id for p in members}) == 1  # one node per workload
        env = {e["name"]: e["value"] for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == members[0].env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]
        annotations = manifest["spec"]["template"]["metadata"]["annotations"]
        assert ("gpuplane.io/gpus" in annotations) == (len(members) == 1)
    check_invariants()


def test_a_mig_replica_requests_its_profile_and_names_its_instance(cluster):
    deployment = services.deploy(spec(name="mig", memory_gb=4, sharing="mig"), cluster=cluster)

    (placement,) = deployment.placements.all()
    (held,) = Partition.objects.filter(hold__placement=placement)
    assert placement.mig_profile == held.mig_profile and held.kind == PartitionKind.MIG
    manifest = workload(cluster, placement.workload_name)
    pod = manifest["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "4", "memory": "16Gi", f"nvidia.com/mig-{held.mig_profile}": "1"}
    assert pod["metadata"]["annotations"]["gpuplane.io/mig-start"] == str(held.mig_start)
    check_invariants()


def test_it_is_all_or_nothing_across_replicas(cluster):
    before = capacity_state()

    # 8 GPUs of >= 37.5 GB on one node: only a100-node-8 has them free, so replica 0 fits (in
    # the decision) and replica 1 does not.
    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="gang", memory_gb=300, gpu_count=8, replicas=5), cluster=cluster)

    assert raised.value.replica_index > 0  # earlier replicas fitted, in the decision only
    assert raised.value.message.startswith(f"Replica {raised.value.replica_index + 1} of 5 could not be placed")
    assert "0/12 nodes are available" in raised.value.message
    assert not Deployment.objects.exists() and not Placement.objects.exists() and not Decision.objects.exists()
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []


def test_nothing_fits_gives_the_kube_scheduler_diagnosis(cluster):
    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="huge", memory_gb=200), cluster=cluster)

    assert raised.value.message.startswith("No GPU of this cluster can hold 200 GB")
    assert raised.value.message.endswith("0/12 nodes are available: 12 nodes have insufficient GPU memory")
    assert raised.value.decision["outcome"] == "unschedulable"
    assert raised.value.decision["diagnosis"]["available"] == 0


def _histogram(sample: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"gpuplane_placement_decision_seconds{sample}", labels) or 0.0


class SlowCluster:
    """The simulated cluster, with a cluster API that takes `delay_s` to create a workload."""

    def __init__(self, cluster, delay_s: float) -> None:
        self._cluster, self.delay_s = cluster, delay_s

    def create_workload(self, spec) -> None:
        time.sleep(self.delay_s)
        self._cluster.create_workload(spec)

    def __getattr__(self, name):
        return getattr(self._cluster, name)


def test_the_histogram_times_the_whole_request_once_slow_cluster_included(cluster):
    count, total = _histogram("_count"), _histogram("_sum")
    fast = _histogram("_bucket", le="0.25")

    services.deploy(spec(replicas=2), cluster=SlowCluster(cluster, 0.3))

    # One observation per request (not per replica), and it includes the 0.3 s the cluster took:
    # timing only the placement core would have put it in the sub-0.25 s buckets.
    assert _histogram("_count") == count + 1
    assert _histogram("_sum") - total >= 0.3
    assert _histogram("_bucket", le="0.25") == fast


def test_a_request_that_fits_nowhere_is_timed_too(cluster):
    count = _histogram("_count")
    with pytest.raises(NoCapacity):
        services.deploy(spec(name="huge", memory_gb=200), cluster=cluster)
    assert _histogram("_count") == count + 1


def test_placing_a_replica_of_an_existing_deployment_is_timed_once(cluster):
    deployment = services.deploy(spec(replicas=1), cluster=cluster)
    count = _histogram("_count")
    services.place_replicas(deployment, [1], cluster=cluster)
    assert _histogram("_count") == count + 1


# ---- the OME InferenceService alternative ----------------------------------------------------------


def test_the_inference_service_template_mirrors_the_workload(cluster):
    pytest.importorskip("jinja2")
    deployment = services.deploy(spec(name="emb", priority="low", labels={"team": "search"}), cluster=cluster)
    placement = deployment.placements.select_related("node").get()
    (workload_spec,) = workloads.workload_specs(deployment, [placement], {0: 1})
    workload_spec.env["TRICKY"] = 'quote " and\nnewline: {x}'

    manifest = workloads.inference_service_manifest(workload_spec, model="bge-large", runtime="vllm-embed")

    assert (manifest["apiVersion"], manifest["kind"]) == ("ome.io/v1beta1", "InferenceService")
    assert manifest["metadata"]["name"] == placement.workload_name
    assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplane"
    engine = manifest["spec"]["engine"]
    assert (engine["minReplicas"], engine["maxReplicas"]) == (1, 1)
    terms = engine["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == [placement.node.name]
    assert engine["runner"]["resources"] == {"requests": {"cpu": "4", "memory": "16Gi"},
                                             "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}
    env = {item["name"]: item["value"] for item in engine["runner"]["env"]}
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["TRICKY"] == 'quote " and\nnewline: {x}'  # values cannot change the document's shape
    assert manifest["spec"]["model"] == {"name": "bge-large"}
    assert manifest["spec"]["runtime"] == {"name": "vllm-embed"}
