"""scheduler.services: validate, decide, reserve, execute, delete (on the demo cluster)."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from prometheus_client import REGISTRY

from nodes.choices import PartitionKind
from nodes.cluster.base import ClusterError
from nodes.cluster.manifests import pinned_node
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Partition
from scheduler import services, workloads
from scheduler.choices import DecisionOutcome, DeploymentStatus, PlacementStatus
from scheduler.models import Decision, Deployment, Placement
from scheduler.services import DeploySpec, NoCapacity
from tests.scheduler.inventory import FakeClock, capacity_state, check_invariants, demo_cluster, set_utilization

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return demo_cluster()


def spec(**overrides) -> DeploySpec:
    values = {"name": "chat", "model": "llama-3-8b", "memory_gb": 8.0}
    values.update(overrides)
    return DeploySpec(**values)


def workload(cluster, name):
    return next(d for d in cluster.list_objects("Deployment") if d["metadata"]["name"] == name)


# ---- deploy ------------------------------------------------------------------------------------


def test_it_places_reserves_and_creates_one_pinned_workload(cluster):
    deployment = services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    assert deployment.status == DeploymentStatus.PLACED
    (placement,) = deployment.placements.all()
    assert placement.status == PlacementStatus.BINDING
    assert placement.sharing == PartitionKind.EXCLUSIVE and placement.node.gpu_model.startswith("H100")
    (held,) = Partition.objects.filter(placement=placement)
    assert held.gpu.index == placement.gpu_indexes[0]
    gpu = GPU.objects.get(pk=held.gpu_id)
    assert (gpu.allocated_milli, gpu.allocated_memory_mib) == (1000, gpu.memory_mib)

    manifest = workload(cluster, placement.workload_name)
    pod = manifest["spec"]["template"]
    assert pinned_node(manifest) == placement.node.name
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
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
    (held,) = placement.partitions.all()
    assert placement.mig_profile == held.mig_profile and held.kind == PartitionKind.MIG
    manifest = workload(cluster, placement.workload_name)
    pod = manifest["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {f"nvidia.com/mig-{held.mig_profile}": "1"}
    assert pod["metadata"]["annotations"]["gpuplane.io/mig-start"] == str(held.mig_start)
    check_invariants()


def test_it_is_all_or_nothing_across_replicas(cluster):
    before = capacity_state()

    # 8 GPUs of >= 37.5 GB on one node: only a100-node-8 has them free, so replica 0 fits (in
    # the decision) and replica 1 does not.
    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="gang", memory_gb=300, gpu_count=8, replicas=5), cluster=cluster)

    assert raised.value.replica_index > 0  # earlier replicas fitted, in the decision only
    assert raised.value.message.startswith("0/12 nodes are available")
    assert not Deployment.objects.exists() and not Placement.objects.exists() and not Decision.objects.exists()
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []


def test_nothing_fits_gives_the_kube_scheduler_diagnosis(cluster):
    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="huge", memory_gb=200), cluster=cluster)

    assert raised.value.message.startswith("0/12 nodes are available: ")
    assert "insufficient GPU memory" in raised.value.message
    assert raised.value.decision["outcome"] == "unschedulable"
    assert raised.value.decision["diagnosis"]["available"] == 0


def test_each_decision_is_timed_into_the_histogram(cluster):
    def count() -> float:
        return REGISTRY.get_sample_value("gpuplane_placement_decision_seconds_count") or 0.0

    before = count()
    services.deploy(spec(replicas=2), cluster=cluster)

    assert count() == before + 2


# ---- default scheduler ---------------------------------------------------------------------------


def test_disabled_gpu_selection_hands_every_replica_to_the_default_scheduler(cluster):
    before = capacity_state()

    deployment = services.deploy(spec(enable_gpu_selection=False, replicas=2), cluster=cluster)

    assert deployment.status == DeploymentStatus.PLACED
    assert list(deployment.decisions.values_list("outcome", flat=True)) == ["skipped", "skipped"]
    assert all(p.node_id is None for p in deployment.placements.all())
    assert capacity_state() == before  # nothing reserved by gpuplane
    (name,) = {p.workload_name for p in deployment.placements.all()}
    manifest = workload(cluster, name)
    assert pinned_node(manifest) is None and manifest["spec"]["replicas"] == 2
    assert services.placement_summary(deployment.placements.first())["sharing"] == "default-scheduler"


def test_busy_gpus_hand_over_to_the_default_scheduler_when_allowed(cluster):
    set_utilization("", 95.0)  # every GPU of every node

    deployment = services.deploy(spec(name="busy"), cluster=cluster)

    decision = deployment.decisions.get()
    assert decision.outcome == DecisionOutcome.DEFAULT_SCHEDULER
    assert decision.matrix["outcome"] == "default-scheduler"
    assert "handed over to the default Kubernetes scheduler" in decision.message
    assert deployment.placements.get().node_id is None


def test_busy_gpus_are_a_conflict_when_the_handover_is_not_allowed(cluster):
    set_utilization("", 95.0)

    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="busy", allow_default_scheduler=False), cluster=cluster)

    assert "utilization >= 90%" in raised.value.message


def test_a_capacity_shortage_is_never_handed_over(cluster):
    with pytest.raises(NoCapacity):
        services.deploy(spec(name="huge", memory_gb=200, allow_default_scheduler=True), cluster=cluster)
    assert not Deployment.objects.exists()


# ---- conflicts ---------------------------------------------------------------------------------


def steal_on_decide(monkeypatch, times: int) -> list[int]:
    """Make another writer take what each of the next ``times`` decisions chose (a pod grabs it)."""
    stolen: list[int] = []
    real_decide = services.decide

    def decide(spec, inventory, scheduler, **options):
        plans = real_decide(spec, inventory, scheduler, **options)
        if len(stolen) < times:
            for plan in plans:
                for claim in plan.claims:
                    for row in claim.candidates:
                        Partition.objects.filter(pk=row.pk).update(pod=f"other/thief-{row.pk}")
                        stolen.append(row.pk)
        return plans

    monkeypatch.setattr(services, "decide", decide)
    return stolen


def test_a_conflict_is_retried_on_a_fresh_snapshot(cluster, monkeypatch):
    stolen = steal_on_decide(monkeypatch, times=1)

    deployment = services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    (placement,) = deployment.placements.all()
    held = Partition.objects.get(placement=placement)
    assert stolen and held.pk not in stolen
    assert Deployment.objects.count() == 1  # the conflicting attempt left nothing behind


def test_endless_conflicts_end_in_a_clean_409(cluster, monkeypatch):
    steal_on_decide(monkeypatch, times=10_000)
    before_placements = Placement.objects.count()

    with pytest.raises(NoCapacity) as raised:
        services.deploy(spec(name="big", memory_gb=40, priority="high", latency_slo_ms=80), cluster=cluster)

    assert "capacity kept changing" in raised.value.message or raised.value.message.startswith("0/")
    assert Placement.objects.count() == before_placements == 0


# ---- delete ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    {"name": "whole", "memory_gb": 40, "priority": "high", "latency_slo_ms": 50, "replicas": 2},
    {"name": "gang", "memory_gb": 120, "gpu_count": 4},
    {"name": "weighted", "memory_gb": 2, "sharing": "mps-weighted", "replicas": 3},
    {"name": "slices", "memory_gb": 3, "sharing": "timeslice", "replicas": 2},
    {"name": "mig", "memory_gb": 4, "sharing": "mig"},
    {"name": "mps", "memory_gb": 8, "priority": "low", "replicas": 2},
])
def test_delete_releases_exactly_what_deploy_reserved(cluster, overrides):
    before = capacity_state()
    deployment = services.deploy(spec(**overrides), cluster=cluster)
    assert capacity_state() != before
    check_invariants()

    services.delete_deployment(deployment, cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.DELETED
    assert set(deployment.placements.values_list("status", flat=True)) == {PlacementStatus.RELEASED}
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []
    check_invariants()


def test_delete_is_idempotent(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    services.delete_deployment(deployment, cluster=cluster)
    after = capacity_state()

    services.delete_deployment(deployment, cluster=cluster)

    assert capacity_state() == after


def test_delete_keeps_the_reservation_when_the_cluster_refuses(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    reserved = capacity_state()
    cluster.inject_fault("delete_workload", "apiserver unavailable")

    with pytest.raises(ClusterError, match="apiserver unavailable"):
        services.delete_deployment(deployment, cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.PLACED
    assert capacity_state() == reserved  # its pods may still run there


def test_a_workload_already_gone_does_not_block_the_delete(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    before_deploy_capacity = Partition.objects.filter(placement__isnull=False).count()
    cluster.delete_workload(deployment.namespace, deployment.placements.get().workload_name)

    services.delete_deployment(deployment, cluster=cluster)

    assert before_deploy_capacity == 1
    assert not Partition.objects.filter(placement__isnull=False).exists()


# ---- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"name": "Not_A_Label"}, "name"),
    ({"name": "x" * 64}, "name"),
    ({"name": "bad\x00name"}, "name"),
    ({"namespace": "-dash"}, "namespace"),
    ({"model": ""}, "model"),
    ({"model": "m\x00"}, "model"),
    ({"memory_gb": 0}, "memory_gb"),
    ({"memory_gb": -1.5}, "memory_gb"),
    ({"memory_gb": float("nan")}, "memory_gb"),
    ({"memory_gb": float("inf")}, "memory_gb"),
    ({"memory_gb": "8"}, "memory_gb"),
    ({"gpu_count": 0}, "gpu_count"),
    ({"gpu_count": 17}, "gpu_count"),
    ({"replicas": 0}, "replicas"),
    ({"replicas": 10_000}, "replicas"),
    ({"latency_slo_ms": 0}, "latency_slo_ms"),
    ({"workload_type": "mining"}, "workload_type"),
    ({"priority": "urgent"}, "priority"),
    ({"sharing": "half"}, "sharing"),
    ({"sharing": "timeslice", "gpu_count": 2}, "sharing"),
    ({"sharing": "mps", "gpu_count": 4}, "sharing"),
    ({"labels": ["a"]}, "labels"),
    ({"labels": {"team": 1}}, "labels"),
    ({"labels": {"bad key!": "x"}}, "labels"),
    ({"labels": {"team": "a b"}}, "labels"),
    ({"labels": {"gpuplane.io/deployment": "7"}}, "labels"),
    ({"labels": {"app.kubernetes.io/managed-by": "me"}}, "labels"),
])
def test_invalid_requests_are_refused_per_field_and_store_nothing(cluster, overrides, field):
    with pytest.raises(ValidationError) as raised:
        services.deploy(spec(**overrides), cluster=cluster)

    assert field in raised.value.message_dict
    assert not Deployment.objects.exists()


def test_valid_labels_and_an_8_gpu_gang_pass_validation():
    checked = services.validate_spec(spec(gpu_count=8, labels={"team": "search", "example.com/tier": "canary-1",
                                                               "empty": ""}))
    assert checked.labels["example.com/tier"] == "canary-1"
    assert checked.memory_gb == 8.0
    assert spec(memory_gb=7.99).memory_mib == 8182  # rounded up, never down


def test_placement_summary_reads_like_the_contract(cluster):
    deployment = services.deploy(spec(name="weighted", memory_gb=2, sharing="mps-weighted"), cluster=cluster)

    summary = services.placement_summary(deployment.placements.get())

    assert summary == {"node": "a100-node-4", "gpu_model": "A100-SXM4-40GB", "gpus": [0], "sharing": "mps-weighted",
                       "share_percent": 25.0, "mig_profile": ""}


# ---- agreement with inventory sync ----------------------------------------------------------------


def test_inventory_sync_counts_our_pods_exactly_once():
    clock = FakeClock()
    cluster = demo_cluster(clock)
    for overrides in [
        {"name": "whole", "memory_gb": 40, "priority": "high", "latency_slo_ms": 50},
        {"name": "weighted", "memory_gb": 2, "sharing": "mps-weighted", "replicas": 2},
        {"name": "slices", "memory_gb": 3, "sharing": "timeslice"},
        {"name": "mig", "memory_gb": 4, "sharing": "mig"},
        {"name": "mps", "memory_gb": 8, "priority": "low", "replicas": 3},
    ]:
        services.deploy(spec(**overrides), cluster=cluster)
    clock.advance(5)  # every pod bound and running
    assert all(p.phase == "Running" for p in cluster.list_gpu_pods())
    reserved = capacity_state()

    report = sync_inventory(cluster)

    assert report.unplaced_pods == []
    assert capacity_state() == reserved
    check_invariants()


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
    assert engine["runner"]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    env = {item["name"]: item["value"] for item in engine["runner"]["env"]}
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["TRICKY"] == 'quote " and\nnewline: {x}'  # values cannot change the document's shape
    assert manifest["spec"]["model"] == {"name": "bge-large"}
    assert manifest["spec"]["runtime"] == {"name": "vllm-embed"}
