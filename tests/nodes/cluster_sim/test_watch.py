"""The simulated cluster's watch tells events apart as the Kubernetes API does: an object created
after the watch's resourceVersion is ADDED (even when it changed again since), one that existed
then and changed is MODIFIED, one gone is DELETED."""
import sqlite3

from nodes.cluster.sim import SimulatedCluster
from tests.nodes.cluster_sim.helpers import A100_80, gpu


def _events(changes):
    return sorted((event.type, event.key) for event in changes.events)


def test_a_node_created_since_the_version_is_added_and_one_changed_is_modified(cluster):
    cluster.add_gpu_nodes([{"name": f"gpu-{i}", "gpu_count": 1, **A100_80} for i in range(2)])
    since = cluster.list_nodes_versioned().resource_version

    cluster.add_gpu_node("gpu-2", gpu_count=2, **A100_80)
    cluster.cordon("gpu-0")
    cluster.set_node_labels("gpu-2", {"team": "a"})  # created, then changed: still new to the watcher

    changes = cluster.watch_nodes(since, 0)

    assert _events(changes) == [("ADDED", "gpu-2"), ("MODIFIED", "gpu-0")]
    added = next(event.item for event in changes.events if event.key == "gpu-2")
    assert added is not None and added.labels["team"] == "a" and len(added.gpus) == 2  # as it is now
    # From a version after the node was made, a change of it is a modification.
    assert _events(cluster.watch_nodes(changes.resource_version, 0)) == []
    cluster.cordon("gpu-2")
    assert _events(cluster.watch_nodes(changes.resource_version, 0)) == [("MODIFIED", "gpu-2")]


def test_pods_are_added_then_deleted(cluster):
    cluster.add_gpu_node("gpu-0", gpu_count=2, **A100_80)
    cluster.run_pod("team", "kept", "gpu-0", resources=gpu(1), gpus=[0])
    since = cluster.list_gpu_pods_versioned().resource_version

    cluster.run_pod("team", "train", "gpu-0", resources=gpu(1), gpus=[1])
    cluster.set_pod_ready("team", "kept", False)
    assert _events(cluster.watch_gpu_pods(since, 0)) == [("ADDED", "team/train"), ("MODIFIED", "team/kept")]

    after_add = cluster.list_gpu_pods_versioned().resource_version
    cluster.delete_pod("team", "train")
    assert _events(cluster.watch_gpu_pods(after_add, 0)) == [("DELETED", "team/train")]


def test_a_node_deleted_and_made_again_since_is_added(cluster):
    cluster.add_gpu_nodes([{"name": f"gpu-{i}", "gpu_count": 1, **A100_80} for i in range(2)])
    since = cluster.list_nodes_versioned().resource_version

    cluster.reset()
    cluster.add_gpu_node("gpu-0", gpu_count=4, **A100_80)

    assert _events(cluster.watch_nodes(since, 0)) == [("ADDED", "gpu-0"), ("DELETED", "gpu-1")]


def test_a_state_file_from_before_creation_versions_is_watched_on(tmp_path, clock):
    path = tmp_path / "old.db"
    source = SimulatedCluster(tmp_path / "source.db", clock=clock)
    source.add_gpu_nodes([{"name": f"gpu-{i}", "gpu_count": 1, **A100_80} for i in range(2)])
    with sqlite3.connect(tmp_path / "source.db") as connection, sqlite3.connect(path) as old:
        connection.backup(old)
    with sqlite3.connect(path) as old:  # the store's table as it was: no creation versions
        old.execute("ALTER TABLE objects DROP COLUMN created")

    cluster = SimulatedCluster(path, clock=clock)
    since = cluster.list_nodes_versioned().resource_version
    cluster.cordon("gpu-1")
    cluster.add_gpu_node("gpu-2", gpu_count=1, **A100_80)

    assert cluster.list_nodes() != [] and len(cluster.list_nodes()) == 3
    assert _events(cluster.watch_nodes(since, 0)) == [("ADDED", "gpu-2"), ("MODIFIED", "gpu-1")]
