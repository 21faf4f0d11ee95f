"""`manage.py load_demo_cluster`: the 12-node demo on the simulated cluster, synced into the inventory."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from nodes.cluster.backends import get_cluster
from nodes.holds import free_partition_filter
from nodes.mig import validate_placements
from nodes.models import GPU, Node, Partition
from scheduler.models import Deployment, Placement

pytestmark = pytest.mark.django_db


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_demo_cluster", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def demo() -> str:
    return load()


def test_it_loads_four_h100_and_eight_a100_nodes(demo):
    assert Node.objects.count() == 12
    h100 = Node.objects.filter(gpu_model="H100-SXM5-80GB")
    a100 = Node.objects.filter(gpu_model="A100-SXM4-40GB")
    assert sorted(h100.values_list("name", flat=True)) == [f"h100-node-{i}" for i in range(1, 5)]
    assert sorted(a100.values_list("name", flat=True)) == [f"a100-node-{i}" for i in range(1, 9)]
    assert all(n.gpu_count == 8 for n in h100)
    assert {n.gpu_count for n in a100} <= {4, 8}
    assert set(GPU.objects.filter(node__in=h100).values_list("memory_mib", flat=True)) == {81559}
    assert set(GPU.objects.filter(node__in=a100).values_list("memory_mib", flat=True)) == {40960}
    assert "nodes: 12 (A100-SXM4-40GB 8, H100-SXM5-80GB 4)" in demo


def test_it_covers_every_sharing_mode(demo):
    modes = set(Node.objects.values_list("sharing_mode", flat=True))
    assert modes == {"exclusive", "mig", "mps", "mps-weighted", "timeslice"}
    kinds = set(Partition.objects.values_list("kind", flat=True))
    assert kinds == {"exclusive", "mig", "mps", "mps-weighted", "timeslice"}
    assert Node.objects.filter(name__in=["h100-node-1", "h100-node-2"], sharing_mode="exclusive").count() == 2


def test_it_has_uniform_mps_nodes_at_r2_and_r4(demo):
    mps = Node.objects.filter(sharing_mode="mps")
    assert {n.sharing_replicas for n in mps} == {2, 4}
    for node in mps:
        shares = set(Partition.objects.filter(gpu__node=node).values_list("share_milli", flat=True))
        assert shares == {1000 // node.sharing_replicas}  # 500 on R=2, 250 on R=4
        assert node.applied_config == f"gpuplane-mps-{node.sharing_replicas}"
        assert node.labels["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_it_has_a_weighted_mps_gpu_holding_a_half_and_a_quarter_share(demo):
    node = Node.objects.get(sharing_mode="mps-weighted")
    assert node.labels["gpuplane.io/sharing-mode"] == "mps-weighted"
    assert node.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert node.sharing_replicas == 4
    gpu = GPU.objects.get(node=node, index=0)
    assert sorted(gpu.partitions.values_list("share_milli", flat=True)) == [250, 500]
    assert gpu.allocated_milli == 750  # 500 + 250
    assert gpu.allocated_memory_mib == 20480 + 8192


def test_its_mig_layouts_are_valid_and_differ_per_gpu(demo):
    mig_gpus = GPU.objects.filter(mig_enabled=True).select_related("node")
    assert mig_gpus.exists()
    for gpu in mig_gpus:
        placements = [(p.mig_profile, p.mig_start, p.mig_size) for p in gpu.partitions.order_by("mig_start")]
        validate_placements(gpu.model, placements)  # raises InvalidMIGLayout if any overlap / bad start
        assert gpu.partitions.aggregate(memory=Sum("memory_mib"))["memory"] <= gpu.memory_mib
    h100_layouts = {
        tuple(gpu.partitions.order_by("mig_start").values_list("mig_profile", flat=True))
        for gpu in mig_gpus.filter(node__name="h100-node-3")
    }
    assert {("7g.80gb",), ("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7} <= h100_layouts
    assert any(sorted(layout) == ["2g.20gb", "2g.20gb", "3g.40gb"] for layout in h100_layouts)
    assert Node.objects.get(name="h100-node-3").labels["nvidia.com/mig.config.state"] == "success"


def test_it_runs_shared_workloads_on_several_nodes_and_leaves_most_capacity_free(demo):
    occupied = Partition.objects.exclude(pod="")
    assert occupied.filter(pod="serving/llama3-8b-0").exists()
    assert len(set(occupied.values_list("gpu__node__name", flat=True))) >= 8
    assert set(occupied.values_list("kind", flat=True)) == {"exclusive", "mig", "mps", "mps-weighted", "timeslice"}
    for node in Node.objects.all():
        free_partitions = Partition.objects.filter(free_partition_filter(), gpu__node=node)
        free_weighted = GPU.objects.filter(node=node, allocated_milli=0)
        assert free_partitions.exists() or free_weighted.exists(), node.name
    total_milli = GPU.objects.count() * 1000
    assert GPU.objects.aggregate(used=Sum("allocated_milli"))["used"] < total_milli * 0.3


def test_the_demo_syncs_cleanly(demo):
    assert "unknown GPU products" not in demo
    assert "pods without a partition" not in demo


def test_if_empty_does_nothing_when_the_inventory_has_nodes(demo):
    before = list(Node.objects.order_by("pk").values())
    out = load("--if-empty")
    assert "already has 12 node(s)" in out
    assert list(Node.objects.order_by("pk").values()) == before


def test_if_empty_loads_into_an_empty_inventory():
    out = load("--if-empty")
    assert Node.objects.count() == 12
    assert "Seeded" in out


def test_if_empty_syncs_from_an_existing_simulated_cluster_without_reseeding(demo):
    Node.objects.all().delete()
    out = load("--if-empty")
    assert "already had nodes" in out
    assert Node.objects.count() == 12


def test_loading_twice_without_flags_is_refused():
    load()
    with pytest.raises(CommandError, match="--reset"):
        load()


def test_it_is_refused_for_a_kubernetes_cluster(settings):
    settings.GPUPLANE_CLUSTER = "kubernetes"
    with pytest.raises(CommandError, match="kubernetes"):
        load()
    with pytest.raises(CommandError, match="kubernetes"):
        load("--if-empty")
    assert not Node.objects.exists()


def test_reset_rebuilds_the_demo(demo):
    cluster = get_cluster()
    cluster.run_pod("extra", "pod-0", "a100-node-8", resources={"nvidia.com/gpu": 1})
    load("--reset")
    assert Node.objects.count() == 12
    assert not Partition.objects.filter(pod="extra/pod-0").exists()
    assert "extra/pod-0" not in {pod.key for pod in get_cluster().list_gpu_pods()}


def test_reset_is_refused_while_placements_exist_unless_forced(demo):
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=16384)
    Placement.objects.create(deployment=deployment, node=Node.objects.get(name="a100-node-8"))
    with pytest.raises(CommandError, match="placement"):
        load("--reset")
    assert Placement.objects.count() == 1

    load("--reset", "--force")
    assert Placement.objects.count() == 0
    assert Node.objects.count() == 12
