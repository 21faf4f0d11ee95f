"""Other teams' pods with a ReplicaSet owner come back after an eviction, as their ReplicaSet would
make them: a new name, Pending, the same resources, labels and annotations, placed by the default
scheduler where they fit, or left Pending with its message. A bare pod does not come back."""

from nodes.contract import ANNOTATION_ASSIGNED_GPUS, ANNOTATION_MIG_START, ANNOTATION_SHARE_MILLI
from tests.nodes.cluster_sim.helpers import A100_80, H100, gpu, raw_pod


def other_pods(cluster):
    return {p.name: p for p in cluster.list_gpu_pods() if p.namespace == "serving"}


def test_an_evicted_replica_set_pod_is_recreated_under_a_new_name_and_scheduled_off_the_cordoned_node(cluster, clock):
    for name in ("gpu-1", "gpu-2"):
        cluster.add_gpu_node(name, gpu_count=2, **A100_80)
    cluster.run_pod("serving", "mistral-7b-0", "gpu-1", resources=gpu(1), gpus=[1], share_milli=500,
                    labels={"app": "mistral"}, annotations={"team": "nlp"}, owner_kind="ReplicaSet")
    original = raw_pod(cluster, "mistral-7b-0")
    cluster.cordon("gpu-1")

    cluster.evict_pod("serving", "mistral-7b-0")

    (replacement,) = other_pods(cluster).values()
    assert replacement.name != "mistral-7b-0"
    owner = original["metadata"]["ownerReferences"][0]["name"]
    assert replacement.name.startswith(f"{owner}-")
    assert replacement.owner_kind == "ReplicaSet" and replacement.phase == "Pending" and not replacement.ready
    assert replacement.node_name == "gpu-2"  # bound by the scheduler, not on the cordoned node
    assert replacement.gpu_requests == {"nvidia.com/gpu": 1}
    assert replacement.labels == {"app": "mistral"}
    # Its template's annotations; the devices the old pod was given on gpu-1 are not part of it.
    assert replacement.annotations == {"team": "nlp", ANNOTATION_SHARE_MILLI: "500"}
    assert ANNOTATION_ASSIGNED_GPUS not in replacement.annotations
    raw = raw_pod(cluster, replacement.name)
    assert raw["metadata"]["ownerReferences"][0]["name"] == owner
    assert raw["spec"]["containers"] == original["spec"]["containers"]

    clock.advance(2)
    (ready,) = other_pods(cluster).values()
    assert ready.name == replacement.name and ready.phase == "Running" and ready.ready
    # Exactly one replica: later passes create no more.
    clock.advance(10)
    assert list(other_pods(cluster)) == [replacement.name]


def test_a_recreated_pod_whose_mig_shape_fits_nowhere_stays_pending_with_the_schedulers_message(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **H100)
    cluster.add_gpu_node("gpu-2", gpu_count=1, **H100)
    cluster.set_mig_config("one-3g", [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}}])
    cluster.set_node_labels("gpu-1", {"nvidia.com/mig.config": "one-3g"})
    clock.advance(5)
    cluster.run_pod("serving", "llama3-8b-mig-0", "gpu-1", resources={"nvidia.com/mig-3g.40gb": 1}, gpus=[0],
                    mig_start=4, owner_kind="ReplicaSet")
    cluster.cordon("gpu-1")

    cluster.evict_pod("serving", "llama3-8b-mig-0")
    clock.advance(30)

    (replacement,) = other_pods(cluster).values()
    assert replacement.name != "llama3-8b-mig-0"
    assert replacement.phase == "Pending" and replacement.node_name == ""
    assert replacement.gpu_requests == {"nvidia.com/mig-3g.40gb": 1}
    assert ANNOTATION_MIG_START not in replacement.annotations
    scheduled = next(c for c in raw_pod(cluster, replacement.name)["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == ("0/2 nodes are available: 1 Insufficient nvidia.com/mig-3g.40gb, "
                                    "1 node(s) were unschedulable.")

    # The cordon lifted, the scheduler binds it where the shape is.
    cluster.uncordon("gpu-1")
    (bound,) = other_pods(cluster).values()
    assert bound.name == replacement.name and bound.node_name == "gpu-1"


def test_a_pod_that_required_a_node_keeps_that_affinity_when_recreated(cluster, clock):
    for name in ("gpu-1", "gpu-2"):
        cluster.add_gpu_node(name, gpu_count=1, **A100_80)
    cluster.run_pod("serving", "pinned-0", "gpu-1", resources=gpu(1), owner_kind="ReplicaSet")
    # Give the stored pod a required hostname affinity, as its ReplicaSet's template would have.
    state = cluster.state_file
    with state.transaction(lambda s: None) as raw:
        raw["pods"]["serving/pinned-0"]["spec"]["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-1"]}]}]}}}
        raw["sim"]["replica_sets"]["serving/pinned-0-owner"]["template"]["spec"]["affinity"] = (
            raw["pods"]["serving/pinned-0"]["spec"]["affinity"])
    cluster.cordon("gpu-1")

    cluster.evict_pod("serving", "pinned-0")

    (replacement,) = other_pods(cluster).values()
    assert replacement.phase == "Pending" and replacement.node_name == ""  # not on gpu-2: it must have gpu-1
    cluster.uncordon("gpu-1")
    assert other_pods(cluster)[replacement.name].node_name == "gpu-1"


def test_a_bare_pod_is_gone_for_good_once_evicted(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.run_pod("serving", "notebook", "gpu-1", resources=gpu(1))
    cluster.evict_pod("serving", "notebook")
    clock.advance(10)
    assert other_pods(cluster) == {}
