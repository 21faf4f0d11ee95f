"""The simulated scheduler and kubelet: binding, readiness delay, the scheduler's reasons, admission."""


from nodes.sharing.device_plugin import device_plugin_config
from tests.nodes.cluster_sim.helpers import A100_80, gpu, node, pods_of, raw_pod, workload


def test_a_pinned_pod_binds_and_becomes_ready_after_the_delay(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.create_workload(workload(replicas=2))
    pods = pods_of(cluster, "llm")
    assert [(p.node_name, p.phase, p.ready, p.owner_kind) for p in pods] == [("gpu-1", "Pending", False, "ReplicaSet")] * 2
    assert not cluster.workload_ready("ml", "llm")

    clock.advance(1.9)
    assert not cluster.workload_ready("ml", "llm")
    clock.advance(0.1)
    assert [(p.phase, p.ready) for p in pods_of(cluster, "llm")] == [("Running", True)] * 2
    assert cluster.workload_ready("ml", "llm")


def test_a_pod_that_does_not_fit_stays_pending_with_the_schedulers_reason(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=2, **A100_80)
    cluster.run_pod("other", "trainer", "gpu-1", resources=gpu(1), gpus=[0])
    cluster.create_workload(workload(replicas=2))  # 2 pods x 1 GPU, 1 GPU free
    clock.advance(2)
    pods = pods_of(cluster, "llm")
    assert sorted((p.node_name, p.phase) for p in pods) == [("", "Pending"), ("gpu-1", "Running")]
    pending = next(p for p in pods if not p.node_name)
    scheduled = next(c for c in raw_pod(cluster, pending.name)["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert not cluster.workload_ready("ml", "llm")

    cluster.scale_workload("ml", "llm", 1)  # the unscheduled pod goes first
    assert [p.node_name for p in pods_of(cluster, "llm")] == ["gpu-1"]
    assert cluster.workload_ready("ml", "llm")


def test_a_pod_asking_for_a_missing_resource_stays_pending(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.create_workload(workload(**{"nvidia.com/mig-3g.40gb": 1}))
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_a_cordoned_node_takes_no_pods_until_uncordoned(cluster, clock):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.cordon("gpu-1")
    cluster.create_workload(workload())
    clock.advance(10)
    [pod] = pods_of(cluster, "llm")
    assert pod.node_name == "" and pod.phase == "Pending"
    assert "1 node(s) were unschedulable" in raw_pod(cluster, pod.name)["status"]["conditions"][0]["message"]

    cluster.uncordon("gpu-1")
    assert pods_of(cluster, "llm")[0].node_name == "gpu-1"
    clock.advance(2)
    assert cluster.workload_ready("ml", "llm")


def test_a_not_ready_node_takes_no_pods(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, **A100_80)
    cluster.set_node_ready("gpu-1", False)
    assert not node(cluster, "gpu-1").ready
    cluster.create_workload(workload())
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_unpinned_pods_skip_tainted_and_full_nodes(cluster):
    cluster.add_gpu_node("gpu-a", gpu_count=1, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], **A100_80)
    cluster.add_gpu_node("gpu-b", gpu_count=1, **A100_80)
    cluster.create_workload(workload(node_name=None, replicas=2))
    pods = pods_of(cluster, "llm")
    assert sorted(p.node_name for p in pods) == ["", "gpu-b"]
    pending = next(p for p in pods if not p.node_name)
    assert raw_pod(cluster, pending.name)["status"]["conditions"][0]["message"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
    )


def test_a_pod_pinned_to_a_tainted_node_stays_pending(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=1, taints=[{"key": "maintenance", "effect": "NoExecute"}], **A100_80)
    cluster.create_workload(workload())
    assert pods_of(cluster, "llm")[0].node_name == ""


def test_a_shared_gpu_refuses_a_request_for_several_replicas(cluster):
    cluster.set_device_plugin_config("ts-4", device_plugin_config("time-slicing", 4))
    cluster.add_gpu_node("gpu-1", gpu_count=2, labels={"nvidia.com/device-plugin.config": "ts-4"}, **A100_80)
    cluster.create_workload(workload(**gpu(2)))
    [pod] = pods_of(cluster, "llm")
    assert (pod.node_name, pod.phase) == ("gpu-1", "Failed")
    assert raw_pod(cluster, pod.name)["status"]["reason"] == "UnexpectedAdmissionError"


def test_run_pod_records_gpuplane_annotations_and_counts_against_capacity(cluster):
    cluster.add_gpu_node("gpu-1", gpu_count=4, **A100_80)
    cluster.run_pod("ml", "big", "gpu-1", resources=gpu(3), gpus=[0, 1, 2], share_milli=500, mig_start=4)
    [pod] = cluster.list_gpu_pods()
    assert (pod.phase, pod.ready, pod.gpu_requests) == ("Running", True, {"nvidia.com/gpu": 3})
    assert pod.annotations == {"gpuplane.io/gpus": "0,1,2", "gpuplane.io/share-milli": "500", "gpuplane.io/mig-start": "4"}
    cluster.create_workload(workload(**gpu(2)))
    assert pods_of(cluster, "llm")[0].node_name == ""
