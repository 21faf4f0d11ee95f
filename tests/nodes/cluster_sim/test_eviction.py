"""The simulated Eviction API: PodDisruptionBudgets, DaemonSet pods, ReplicaSet replacement."""

import pytest

from nodes.cluster.base import ClusterError, EvictionBlocked, NotFound
from tests.nodes.cluster_sim.helpers import A100_80, gpu, pods_of, workload


def test_evictions_honour_pod_disruption_budgets(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.add_gpu_node("gpu-2", gpu_count=2, **A100_80)
    cluster.create_workload(workload(node_name=None, replicas=2))
    clock.advance(2)
    cluster.add_pdb("ml", "llm-pdb", {"app.kubernetes.io/name": "llm"}, min_available=2)
    victim = pods_of(cluster, "llm")[0]

    with pytest.raises(EvictionBlocked, match=r"^Cannot evict pod as it would violate the pod's disruption budget\.$"):
        cluster.evict_pod("ml", victim.name)
    assert victim.name in {p.name for p in pods_of(cluster, "llm")}

    cluster.add_pdb("ml", "llm-pdb", {"app.kubernetes.io/name": "llm"}, min_available=1)
    cluster.cordon(victim.node_name)
    cluster.evict_pod("ml", victim.name)
    pods = pods_of(cluster, "llm")
    # The ReplicaSet replaced the evicted pod under a new name, on the node that is not cordoned.
    assert victim.name not in {p.name for p in pods} and len(pods) == 2
    replacement = next(p for p in pods if p.phase == "Pending")
    assert replacement.node_name != victim.node_name and replacement.node_name
    # Only one pod is healthy now: the budget forbids evicting it until the replacement is ready.
    survivor = next(p for p in pods if p.ready)
    with pytest.raises(EvictionBlocked):
        cluster.evict_pod("ml", survivor.name)
    clock.advance(2)
    cluster.evict_pod("ml", survivor.name)


def test_an_unready_pod_may_be_evicted_while_the_budget_holds(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    for name in ("a", "b"):
        cluster.run_pod("ml", name, "gpu-1", resources=gpu(1), labels={"app": "x"})
    cluster.run_pod("ml", "c", "gpu-1", resources=gpu(1), labels={"app": "x"}, ready=False)
    cluster.add_pdb("ml", "x", {"app": "x"}, min_available=2)
    with pytest.raises(EvictionBlocked):
        cluster.evict_pod("ml", "a")
    cluster.evict_pod("ml", "c")
    assert {p.name for p in cluster.list_gpu_pods()} == {"a", "b"}


def test_max_unavailable_counts_the_pods_already_unready(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=3, **A100_80)
    for name in ("a", "b"):
        cluster.run_pod("ml", name, "gpu-1", resources=gpu(1), labels={"app": "x"})
    cluster.run_pod("ml", "c", "gpu-1", resources=gpu(1), labels={"app": "x"}, ready=False)
    cluster.add_pdb("ml", "x", {"app": "x"}, max_unavailable=1)
    # One of three is unready already: the budget of one unavailable is spent.
    with pytest.raises(EvictionBlocked):
        cluster.evict_pod("ml", "a")
    cluster.set_pod_ready("ml", "c", True)
    cluster.evict_pod("ml", "a")
    assert {p.name for p in cluster.list_gpu_pods()} == {"b", "c"}


def test_a_pod_under_two_budgets_cannot_be_evicted(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.run_pod("ml", "a", "gpu-1", resources=gpu(1), labels={"app": "x", "tier": "1"})
    cluster.add_pdb("ml", "by-app", {"app": "x"}, min_available=0)
    cluster.add_pdb("ml", "by-tier", {"tier": "1"}, min_available=0)
    with pytest.raises(ClusterError, match="more than one PodDisruptionBudget"):
        cluster.evict_pod("ml", "a")


def test_daemonset_pods_are_not_evicted(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.run_pod("kube-system", "dcgm-exporter-x1", "gpu-1", resources=gpu(0), owner_kind="DaemonSet")
    with pytest.raises(ClusterError, match="managed by a DaemonSet") as excinfo:
        cluster.evict_pod("kube-system", "dcgm-exporter-x1")
    assert not isinstance(excinfo.value, EvictionBlocked)
    plugin = next(p for p in cluster.list_objects("Pod") if p["metadata"]["namespace"] == "gpu-operator")
    with pytest.raises(ClusterError, match="managed by a DaemonSet"):
        cluster.evict_pod("gpu-operator", plugin["metadata"]["name"])
    with pytest.raises(NotFound):
        cluster.evict_pod("ml", "ghost")


@pytest.mark.parametrize(("budget", "status"), [
    # 4 selected, 3 ready. minAvailable 75% of 4 = 3 -> 3 - 3 = 0 allowed.
    ({"min_available": "75%"}, {"expectedPods": 4, "currentHealthy": 3, "desiredHealthy": 3, "disruptionsAllowed": 0}),
    # maxUnavailable 50% of 4 = 2 -> desired 4 - 2 = 2 -> 3 - 2 = 1 allowed.
    ({"max_unavailable": "50%"}, {"expectedPods": 4, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}),
    # maxUnavailable 30% of 4 = 1.2, rounded up to 2 (as the disruption controller does) -> 1 allowed.
    ({"max_unavailable": "30%"}, {"expectedPods": 4, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}),
    ({"min_available": 2}, {"expectedPods": 4, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}),
])
def test_percent_budgets_are_computed_as_the_disruption_controller_does(cluster, budget, status):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    for name in ("a", "b", "c"):
        cluster.run_pod("ml", name, "gpu-1", resources=gpu(1), labels={"app": "x"})
    cluster.run_pod("ml", "d", "gpu-1", resources=gpu(1), labels={"app": "x"}, ready=False)
    cluster.add_pdb("ml", "x", {"app": "x"}, **budget)
    assert cluster.pdb_status("ml", "x") == status
    if status["disruptionsAllowed"]:
        cluster.evict_pod("ml", "a")
    else:
        with pytest.raises(EvictionBlocked):
            cluster.evict_pod("ml", "a")
