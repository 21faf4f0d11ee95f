"""The trace replay (bench/trace_replay.py) on a small synthetic openb-format cluster: seconds."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from bench import trace_replay
from nodes.catalog import CATALOG


@pytest.fixture(autouse=True)
def _catalog_restored():
    # Profile replays register stand-ins for the trace's GPU models (bench/trace_profiles.py);
    # they must not leak into later tests, which check the catalog is exactly docs/design.md's.
    before = dict(CATALOG)
    yield
    CATALOG.clear()
    CATALOG.update(before)


@pytest.fixture
def lists(tmp_path):
    rng = np.random.default_rng(0)
    nodes = tmp_path / trace_replay.NODE_LIST
    with open(nodes, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i in range(50):
            gpus, model = [(8, "G2"), (2, "T4"), (2, "P100"), (4, "V100M16")][i % 4]
            writer.writerow([f"node-{i}", 96000 if gpus == 8 else 32000, 262144, gpus, model])
    pods = tmp_path / "pods.csv"
    with open(pods, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i in range(150):
            kind = rng.choice(4, p=[0.45, 0.3, 0.15, 0.1])
            num, milli = [(1, int(rng.choice([250, 460, 500]))), (1, 1000), (2, 1000), (0, 0)][kind]
            spec = "T4|P100" if i % 10 == 0 and num else ""
            writer.writerow([f"pod-{i}", int(rng.choice([2000, 6000, 12000])), 16384, num, milli, spec])
    return nodes, pods


def test_json_reports_the_contract_figures_for_every_policy(lists, capsys):
    nodes, pods = lists
    results = {}
    for policy in trace_replay.POLICIES:
        assert trace_replay.main(["--pods", str(pods), "--policy", policy, "--seeds", "42-43", "--json"]) == 0
        results[policy] = result = json.loads(capsys.readouterr().out)
        assert result["policy"] == policy and result["seeds"] == [42, 43]
        for key in ("alloc_100_mean", "alloc_130_mean", "alloc_130_std", "ms_per_decision"):
            assert isinstance(result[key], float), key
        assert 50 < result["alloc_130_mean"] <= 100
        assert result["alloc_100_mean"] <= result["alloc_130_mean"] + 1e-9
    # Packing beats spreading on a cluster this full.
    assert results["fgd"]["alloc_130_mean"] > results["worstfit"]["alloc_130_mean"]


def test_the_workload_follows_the_protocol(lists):
    nodes, pods = lists
    pod_list = trace_replay.load_pods(pods)
    capacity = sum(n.gpu_count for n in trace_replay.load_nodes(nodes)) * 1000
    offered = trace_replay.workload(pod_list, capacity, np.random.default_rng(42))
    assert sorted(offered[: len(pod_list)], key=repr) == sorted(pod_list, key=repr)  # every pod once first
    total = sum(p.total_gpu_milli for p in offered)
    assert total <= 1.3 * capacity < total + max(p.total_gpu_milli for p in pod_list)
    assert any(p.gpu_models == ("T4", "P100") for p in pod_list)


def test_seed_ranges_parse():
    assert trace_replay.parse_seeds("42-44,50") == [42, 43, 44, 50]


def test_same_seed_same_result(lists):
    nodes, pods = lists
    node_list, pod_list = trace_replay.load_nodes(nodes), trace_replay.load_pods(pods)
    first = trace_replay.replay(node_list, pod_list, "fgd", 7)
    second = trace_replay.replay(node_list, pod_list, "fgd", 7)
    assert (first["alloc_100"], first["alloc_130"]) == (second["alloc_100"], second["alloc_130"])


@pytest.mark.parametrize("policy", ["balanced", "packing"])
def test_profiles_replay_through_the_api_scheduler(lists, capsys, policy):
    nodes, pods = lists
    assert trace_replay.main(["--pods", str(pods), "--policy", policy, "--seeds", "42", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["policy"] == policy
    assert 50 < result["alloc_130_mean"] <= 100
    # CPU-only and 2-GPU pods are requests the core takes: none is refused as unexpressible.
    assert result["unexpressible"] == 0 and result["per_seed"][0]["unexpressible"] == 0


def test_profile_replay_keeps_cpu_and_gpu_models_honest(lists):
    from bench.trace_profiles import ProfileReplayer, workload_args
    from scheduler.core.packing import PackPod

    nodes, pods = lists
    node_list = trace_replay.load_nodes(nodes)
    replayer = ProfileReplayer("packing", node_list, workload_args(trace_replay.load_pods(pods)))

    def held() -> list[tuple[str, int]]:  # (GPU model, CPU held by the replay's pods) per node
        return sorted((n.gpu_model, sum(c for c, _ in n.host_holds.values())) for n in replayer.snapshot.nodes
                      if n.host_holds)

    t4 = PackPod(cpu_milli=30000, memory_mib=1024, gpu_milli=500, gpu_count=1, gpu_models=("T4",))
    assert replayer.place(t4)
    assert held() == [("T4", 30000)]
    # The T4 nodes have 32000 CPU: a second 30000 pod cannot go where the first went.
    assert replayer.place(t4)
    assert held() == [("T4", 30000), ("T4", 30000)]
    # A pod bigger than any node's CPU is refused, not pinned where the kubelet would refuse it.
    assert not replayer.place(PackPod(cpu_milli=200000, memory_mib=1, gpu_milli=1000, gpu_count=1))


def test_cpu_only_pods_consume_cpu_through_the_schedulers_reservation(lists):
    from bench.trace_profiles import ProfileReplayer, workload_args
    from scheduler.core.packing import PackPod

    nodes, pods = lists
    replayer = ProfileReplayer("balanced", trace_replay.load_nodes(nodes), workload_args(trace_replay.load_pods(pods)))
    snapshot = replayer.snapshot
    free_before = snapshot.cpu_free_milli.copy()
    cpu_only = PackPod(cpu_milli=20000, memory_mib=4096, gpu_milli=0, gpu_count=0)
    assert replayer.place(cpu_only)
    (node,) = [n for n in snapshot.nodes if n.host_holds]
    i = snapshot.index[node.name]
    # The pod holds CPU and memory and no GPU; the node's free CPU column fell by its request.
    assert list(node.host_holds.values()) == [(20000, 4096)]
    assert all(not gpu.occupied() for gpu in node.gpus)
    assert free_before[i] - snapshot.cpu_free_milli[i] == 20000
    # CPU-only pods fill CPU until none is left: then they are refused (NodeResourcesFit).
    while replayer.place(cpu_only):
        pass
    assert (snapshot.cpu_free_milli < 20000).all()


def test_a_whole_gpu_gang_takes_untouched_gpus_of_a_weighted_node(lists):
    from bench.trace_profiles import ProfileReplayer, workload_args
    from scheduler.core.packing import PackPod

    nodes, pods = lists
    replayer = ProfileReplayer("packing", trace_replay.load_nodes(nodes), workload_args(trace_replay.load_pods(pods)))
    assert replayer.place(PackPod(cpu_milli=1000, memory_mib=1024, gpu_milli=1000, gpu_count=4))
    (node,) = [n for n in replayer.snapshot.nodes if n.host_holds]
    held = [gpu.index for gpu in node.gpus if gpu.occupied()]
    assert len(held) == 4 and all(gpu.allocated_milli == 1000 for gpu in node.gpus if gpu.occupied())
