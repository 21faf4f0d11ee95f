"""The store's costs and guarantees: rows per object, reads that write nothing, versions, old JSON files, processes."""
import json
import multiprocessing
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from nodes.cluster.sim import SimulatedCluster
from nodes.cluster.sim.store import SIM_COLLECTIONS, TOP_COLLECTIONS
from tests.nodes.cluster_sim.helpers import A100_80, gpu, row_versions, stored, workload

REPO_ROOT = Path(__file__).resolve().parents[3]
L4 = {"product": "NVIDIA-L4", "gpu_memory_mib": 23034}


def _fleet(cluster, count):
    cluster.add_gpu_nodes([{"name": f"gpu-{i}", "gpu_count": 2, **A100_80} for i in range(count)])


def _cluster_version(state_path):
    with sqlite3.connect(state_path) as connection:
        return int(connection.execute("SELECT value FROM meta WHERE name = 'version'").fetchone()[0])


def test_a_call_that_only_reads_writes_nothing(cluster, state_path, clock):
    _fleet(cluster, 3)
    cluster.create_workload(workload(node_name="gpu-1"))
    clock.advance(5)
    assert cluster.workload_ready("ml", "llm")  # the catch-up that made it Ready is written here
    before = row_versions(state_path), _cluster_version(state_path)

    cluster.list_nodes()
    cluster.list_gpu_pods()
    assert cluster.workload_ready("ml", "llm")
    cluster.list_objects("Deployment")
    cluster.events()
    assert not cluster.is_empty()

    assert (row_versions(state_path), _cluster_version(state_path)) == before


def test_a_write_rewrites_only_the_objects_it_changed(cluster, state_path):
    _fleet(cluster, 20)
    before = row_versions(state_path)

    cluster.set_node_labels("gpu-7", {"team": "a"})
    cluster.create_workload(workload(node_name="gpu-3"))

    after = row_versions(state_path)
    changed = {row for row, version in after.items() if before.get(row) != version}
    pod = next(key for coll, key in changed if coll == "pods")
    assert changed == {
        ("nodes", "gpu-7"), ("deployments", "ml/llm"), ("pods", pod), ("sim.pods", pod), ("", "counter"),
    }
    assert stored(state_path, "pods", pod)["spec"]["nodeName"] == "gpu-3"  # bound in the same call


def test_every_write_gives_the_object_the_next_resource_version(cluster, state_path):
    _fleet(cluster, 2)
    first = int(stored(state_path, "nodes", "gpu-0")["metadata"]["resourceVersion"])
    cluster.cordon("gpu-0")
    cordoned = stored(state_path, "nodes", "gpu-0")["metadata"]["resourceVersion"]
    cluster.uncordon("gpu-0")
    [raw] = [n for n in cluster.list_objects("Node") if n["metadata"]["name"] == "gpu-0"]

    assert first < int(cordoned) < int(raw["metadata"]["resourceVersion"]) == _cluster_version(state_path)
    assert int(raw["metadata"]["resourceVersion"]) == row_versions(state_path)[("nodes", "gpu-0")]


def test_another_process_s_change_is_parsed_alone(state_path, monkeypatch):
    cluster = SimulatedCluster(state_path)
    _fleet(cluster, 50)
    assert len(cluster.list_nodes()) == 50
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster
        SimulatedCluster(sys.argv[1]).set_node_labels("gpu-9", {"from": "child"})
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(state_path)], cwd=REPO_ROOT, check=True)
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr("nodes.cluster.sim.store.json.loads", lambda text: parsed.append(text) or real_loads(text))

    labels = {n.name: n.labels for n in cluster.list_nodes()}

    assert labels["gpu-9"]["from"] == "child"
    assert [real_loads(text)["metadata"]["name"] for text in parsed] == ["gpu-9"]


def _as_json_document(state_path):
    """The state as the earlier store kept it: one JSON document."""
    document = {"version": 1, "sim": {name: {} for name in SIM_COLLECTIONS}, **{name: {} for name in TOP_COLLECTIONS}}
    with sqlite3.connect(state_path) as connection:
        for coll, key, body in connection.execute("SELECT coll, key, body FROM objects WHERE body IS NOT NULL"):
            value = json.loads(body)
            if coll == "":
                document[key] = value
            elif coll.startswith("sim."):
                document["sim"][coll[4:]][key] = value
            else:
                document[coll][key] = value
    return document


def test_a_json_state_file_is_converted_once(tmp_path, clock):
    source = SimulatedCluster(tmp_path / "source.db", clock=clock)
    _fleet(source, 2)
    source.run_pod("serving", "other", "gpu-1", resources=gpu(1), owner_kind="ReplicaSet")
    source.create_workload(workload(node_name="gpu-0"))
    legacy = tmp_path / "simulated-cluster.json"
    legacy.write_text(json.dumps(_as_json_document(tmp_path / "source.db")))

    converted = SimulatedCluster(legacy, clock=clock)

    assert converted.list_nodes() == source.list_nodes()
    assert converted.list_gpu_pods() == source.list_gpu_pods()
    assert legacy.read_bytes().startswith(b"SQLite format 3\x00")
    # The converted cluster goes on as the old one would: the evicted pod's ReplicaSet brings it back.
    converted.evict_pod("serving", "other")
    assert [p.name for p in converted.list_gpu_pods() if p.namespace == "serving"] != ["other"]
    assert len([p for p in converted.list_gpu_pods() if p.namespace == "serving"]) == 1
    clock.advance(5)
    assert converted.workload_ready("ml", "llm")


def _deploy_and_label(state_path, me, count):
    cluster = SimulatedCluster(state_path)
    for i in range(count):
        cluster.create_workload(workload(name=f"w-{me}-{i}", node_name=f"gpu-{i % 4}"))
        cluster.set_node_labels("gpu-0", {f"writer-{me}/n{i}": str(i)})


def test_concurrent_processes_lose_no_update(state_path):
    SimulatedCluster(state_path).add_gpu_nodes([{"name": f"gpu-{i}", "gpu_count": 8, **L4} for i in range(4)])
    writers, count = 3, 8
    context = multiprocessing.get_context("spawn")  # separate interpreters, as web, worker and beat are
    processes = [context.Process(target=_deploy_and_label, args=(state_path, me, count)) for me in range(writers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [process.exitcode for process in processes] == [0] * writers

    cluster = SimulatedCluster(state_path)
    deployments = {d["metadata"]["name"] for d in cluster.list_objects("Deployment")}
    assert deployments == {f"w-{me}-{i}" for me in range(writers) for i in range(count)}
    labels = next(n for n in cluster.list_nodes() if n.name == "gpu-0").labels
    assert {k for k in labels if k.startswith("writer-")} == {
        f"writer-{me}/n{i}" for me in range(writers) for i in range(count)
    }
    workload_pods = [p for p in cluster.list_gpu_pods() if p.namespace == "ml"]
    assert len(workload_pods) == writers * count and len({p.name for p in workload_pods}) == writers * count
    # 24 one-GPU pods on 4 eight-GPU nodes, each pinned to its node: nothing over-allocated.
    assert all(p.node_name for p in workload_pods)


def test_old_deletions_are_forgotten_and_a_process_that_missed_them_reads_everything(state_path, monkeypatch):
    monkeypatch.setattr("nodes.cluster.sim.store.TOMBSTONE_VERSIONS", 10)
    behind = SimulatedCluster(state_path)
    _fleet(behind, 2)
    assert len(behind.list_nodes()) == 2  # this process has seen the fleet
    code = """
        import sys
        from nodes.cluster.sim import SimulatedCluster, store
        store.TOMBSTONE_VERSIONS = 10
        cluster = SimulatedCluster(sys.argv[1])
        for i in range(8):
            cluster.cordon("gpu-1")
            cluster.uncordon("gpu-1")
        cluster.reset()
        cluster.add_gpu_node("after-reset", product="NVIDIA-L4", gpu_count=1, gpu_memory_mib=23034)
        for i in range(8):
            cluster.cordon("after-reset")
            cluster.uncordon("after-reset")
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(state_path)], cwd=REPO_ROOT, check=True)
    with sqlite3.connect(state_path) as connection:
        tombstones = connection.execute("SELECT count(*) FROM objects WHERE body IS NULL").fetchone()[0]
    assert tombstones == 0  # the reset's deletions were purged ...

    assert [n.name for n in behind.list_nodes()] == ["after-reset"]  # ... and this process still saw them
