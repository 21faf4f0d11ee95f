"""The state file: shared by instances and processes, clocks, corruption, concurrent writers."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from tests.nodes.cluster_sim.helpers import A100_80, node, stored, workload

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_two_instances_on_one_file_share_the_cluster(state_path, clock):
    writer = SimulatedCluster(state_path, clock=clock)
    reader = SimulatedCluster(state_path, clock=clock)
    writer.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    reader.cordon("gpu-1")
    assert node(writer, "gpu-1").unschedulable
    writer.reset()
    assert reader.is_empty()


def test_a_clock_may_be_a_callable(state_path):
    now = [100.0]
    cluster = SimulatedCluster(state_path, clock=lambda: now[0], pod_ready_delay_s=5)
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.create_workload(workload())
    assert not cluster.workload_ready("ml", "llm")
    now[0] += 5
    assert cluster.workload_ready("ml", "llm")


def test_a_corrupt_state_file_is_reported(state_path):
    state_path.write_text("{not json")
    with pytest.raises(ClusterError, match="is corrupt"):
        SimulatedCluster(state_path).list_nodes()


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO_ROOT)


def test_another_process_sees_and_makes_changes(state_path):
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster
        SimulatedCluster(sys.argv[1]).add_gpu_node("from-child", product="NVIDIA-L4", gpu_count=2, gpu_memory_mib=23034)
    """
    assert _python(code, str(state_path)).wait(timeout=30) == 0
    [child_node] = SimulatedCluster(state_path).list_nodes()
    assert child_node.name == "from-child" and child_node.allocatable == {"nvidia.com/gpu": 2}
    assert stored(state_path, "nodes", "from-child")["kind"] == "Node"


def test_concurrent_writers_in_two_processes_lose_no_update(state_path):
    SimulatedCluster(state_path).add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    # Each writer waits for the other to be up, so the two loops really overlap.
    code = """
        import pathlib, sys, time
        from nodes.cluster.sim import SimulatedCluster
        path, me, other = sys.argv[1:]
        cluster = SimulatedCluster(path)
        pathlib.Path(f"{path}.{me}.up").touch()
        deadline = time.monotonic() + 20
        while not pathlib.Path(f"{path}.{other}.up").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        for i in range(20):
            cluster.set_node_labels("gpu-1", {f"writer-{me}/n{i}": str(i)})
    """
    writers = [_python(code, str(state_path), me, other) for me, other in (("a", "b"), ("b", "a"))]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    labels = node(SimulatedCluster(state_path), "gpu-1").labels
    assert {key for key in labels if key.startswith("writer-")} == {f"writer-{w}/n{i}" for w in "ab" for i in range(20)}


# ---- the per-process parsed state --------------------------------------------------------------


def test_an_unchanged_file_is_not_parsed_again(state_path, monkeypatch):
    cluster = SimulatedCluster(state_path)
    cluster.add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    parses = []
    real_loads = json.loads
    monkeypatch.setattr("nodes.cluster.sim.store.json.loads", lambda text: parses.append(1) or real_loads(text))

    assert [n.name for n in SimulatedCluster(state_path).list_nodes()] == ["gpu-1"]
    cluster.set_node_labels("gpu-1", {"team": "a"})
    assert node(cluster, "gpu-1").labels["team"] == "a"
    assert parses == []


def test_a_change_by_another_process_is_read_again(state_path):
    cluster = SimulatedCluster(state_path)
    cluster.add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    assert len(cluster.list_nodes()) == 1  # parsed and kept by this process
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster
        SimulatedCluster(sys.argv[1]).set_node_labels("gpu-1", {"from": "child"})
    """
    assert _python(code, str(state_path)).wait(timeout=30) == 0

    assert node(cluster, "gpu-1").labels["from"] == "child"
    cluster.set_node_labels("gpu-1", {"from-parent": "yes"})  # written over the child's state, not a stale one
    labels = stored(state_path, "nodes", "gpu-1")["metadata"]["labels"]
    assert {"from": "child", "from-parent": "yes"}.items() <= labels.items()


def test_a_file_deleted_and_made_again_is_read_again(state_path):
    cluster = SimulatedCluster(state_path)
    cluster.add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    assert len(cluster.list_nodes()) == 1  # kept by this process
    state_path.unlink()
    SimulatedCluster(state_path).add_gpu_node("gpu-2", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)

    assert [n.name for n in cluster.list_nodes()] == ["gpu-2"]


def test_changes_of_a_block_that_raised_are_not_kept_in_memory(state_path):
    cluster = SimulatedCluster(state_path)
    cluster.add_gpu_node("gpu-1", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
    with pytest.raises(RuntimeError):
        with cluster.state_file.transaction(lambda state: None) as state:
            state["nodes"]["gpu-1"]["metadata"]["labels"]["half-done"] = "yes"
            raise RuntimeError("the block failed")

    assert "half-done" not in node(cluster, "gpu-1").labels


def test_the_backend_the_processes_build_takes_its_delays_from_settings(settings, state_path):
    """get_cluster() (every web, worker and beat process) on the state file, with
    GPUPLANE_SIMULATED_DELAYS over the simulator's defaults (the crash-safety test's processes
    shorten them; a setting left out keeps its default)."""
    settings.GPUPLANE_CLUSTER = "simulated"
    settings.GPUPLANE_SIMULATED_STATE = str(state_path)
    settings.GPUPLANE_SIMULATED_DELAYS = {"pod_ready_delay_s": 0.3, "plugin_restart_s": 0.1}

    cluster = get_cluster()

    assert isinstance(cluster, SimulatedCluster) and cluster.state_file.path == state_path
    assert (cluster.pod_ready_delay_s, cluster.plugin_restart_s) == (0.3, 0.1)
    assert cluster.mig_reconfigure_s == SimulatedCluster(state_path).mig_reconfigure_s
