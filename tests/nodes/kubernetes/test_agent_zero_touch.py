"""Issue 19, must show 4: the node agent needs no manual step on a real (API-level) cluster.

The Kubernetes backend talks to the fake API server, which serves an 8x H100 node as the GPU
operator leaves it: GFD labels, no gpuplane annotation. Inventory sync gives its GPU rows the
placeholder UUIDs `GPU-gpu-node-1-<index>`. Then the real `manage.py gpuplane_agent` code path
runs against the real API (`live_server`) with NVML faked at the pynvml boundary: it reports the
node's GPUs (real UUIDs, GPU 0 in MIG mode with three instances), and its first telemetry batch
is accepted; the next inventory sync (the one the report queued) lays the MIG layout over the
cluster's view and does not fight the agent over the UUIDs; and one bad sample in a batch of
96 leaves the other 95 stored.

The second test is the same first start with nothing issued by anyone: the agent holds only the
projected ServiceAccount token its pod is given, and the server (on the Kubernetes backend too,
through a kubeconfig) learns its node from the fake API server's TokenReview.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pynvml
import pytest
from django.core.management import call_command

from nodes.agent import TelemetryAgent
from nodes.authentication import issue_agent_token
from nodes.collectors.nvml import NVMLCollector
from nodes.inventory import watching
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, GPUSample, Node, NodeAgentToken, NodeGPUReport, Partition
from tests.nodes.fake_nvml import FakeGPU, FakeGPUInstance, FakeMIGDevice, FakeNVML
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import RecordedRequest, Reply

NODE = "gpu-node-1"
REAL = [f"GPU-f6068136-{index:04d}-4a2b-8c3d-5e6f7a8b9c0d" for index in range(8)]


def _stream() -> Reply:
    return Reply(200, b"")


def serve_the_node(kube: Any) -> None:
    def nodes(request: RecordedRequest) -> Reply:
        if request.param("watch") == "true":
            return _stream()
        node = k8s.gpu_node(NODE)
        node["metadata"]["resourceVersion"] = "184321"
        return Reply(200, k8s.list_object("Node", [node]))

    kube.on("GET", "/api/v1/nodes", handler=nodes)
    kube.on("GET", "/api/v1/pods", handler=lambda request: _stream() if request.param("watch") == "true"
            else Reply(200, k8s.list_object("Pod", [])))


def h100s_one_in_mig_mode() -> list[FakeGPU]:
    """What NVML says of the node: GPU 0 in MIG mode with 3g.40gb at 0, 2g.20gb at 4, 1g.10gb at 6
    (instance memory as an H100 80GB reports it), the others whole."""
    instances = [
        FakeGPUInstance(1, 9, b"MIG 3g.40gb", 40448, start=0, size=4),
        FakeGPUInstance(5, 14, b"MIG 2g.20gb", 20096, start=4, size=2),
        FakeGPUInstance(13, 19, b"MIG 1g.10gb", 9984, start=6, size=1),
    ]
    mig = FakeGPU(
        uuid=REAL[0], index=0, mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE, memory_used_mib=0,
        mig_devices=[FakeMIGDevice(f"MIG-{gi.gi_id:02d}-{REAL[0][4:12]}", gi, gi.profile_memory_mb) for gi in instances],
    )
    return [mig] + [FakeGPU(uuid=REAL[index], index=index, utilization=10 * index, memory_used_mib=1024) for index in range(1, 8)]


@pytest.mark.django_db(transaction=True)
def test_a_fresh_node_needs_no_manual_step(kube, cluster, live_server, monkeypatch, capsys):
    watching.forget_mirrors()
    serve_the_node(kube)
    sync_inventory(cluster)
    node = Node.objects.get(name=NODE)
    assert list(node.gpus.order_by("index").values_list("uuid", flat=True)) == [f"GPU-{NODE}-{i}" for i in range(8)]
    assert not Partition.objects.filter(kind="mig").exists()
    _, key = issue_agent_token(node)
    gpus = h100s_one_in_mig_mode()
    FakeNVML(gpus).install(monkeypatch)

    # The agent starts: the command, once, as the DaemonSet's container would run it.
    call_command("gpuplane_agent", "--server", live_server.url, f"--token={key}", "--node", NODE, "--once")

    assert "Posted 8 sample(s) for node gpu-node-1" in capsys.readouterr().out
    # Its first batch was accepted: every GPU row carries its real UUID, and its sample.
    assert list(node.gpus.order_by("index").values_list("uuid", flat=True)) == REAL
    assert sorted(GPUSample.objects.values_list("gpu__uuid", flat=True)) == sorted(REAL)
    report = NodeGPUReport.objects.get(node=node)
    assert (report.revision, report.applied_revision) == (1, 0)  # the MIG layout waits for the sync

    # The inventory sync the report queued (here run by the test, as the worker would).
    sync_inventory(cluster)

    gpu0 = GPU.objects.get(uuid=REAL[0])
    assert gpu0.mig_enabled and Node.objects.get(name=NODE).sharing_mode == "mig"
    assert [
        (p.kind, p.mig_profile, p.mig_start, p.mig_size, p.memory_mib, p.mig_device_uuid)
        for p in gpu0.partitions.order_by("mig_start")
    ] == [
        ("mig", "3g.40gb", 0, 4, 40448, f"MIG-01-{REAL[0][4:12]}"),
        ("mig", "2g.20gb", 4, 2, 20096, f"MIG-05-{REAL[0][4:12]}"),
        ("mig", "1g.10gb", 6, 1, 9984, f"MIG-13-{REAL[0][4:12]}"),
    ]
    assert [p.kind for p in GPU.objects.get(uuid=REAL[1]).partitions.all()] == ["exclusive"]
    # The sync kept the agent's UUIDs (the cluster still shows only placeholders) and marked the
    # report applied; the next sync writes nothing.
    assert list(node.gpus.order_by("index").values_list("uuid", flat=True)) == REAL
    report.refresh_from_db()
    assert report.applied_revision == report.revision
    assert not sync_inventory(cluster).changed

    # One bad sample in a batch of 96 (12 readings of 8 GPUs): the other 95 are stored.
    GPUSample.objects.all().delete()
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    ticks = iter(start + timedelta(seconds=30 * n) for n in range(12))
    collector = NVMLCollector(clock=lambda: next(ticks))
    agent = TelemetryAgent(live_server.url, key, NODE, collector, batch_size=96, sleep=lambda s: None)
    with collector:
        for reading in range(12):
            gpus[3].power_mw = 5_000_000 if reading == 5 else 250_000  # 5000 W: past any board
            agent.collect_once()
        assert len(agent.buffer) == 96
        assert agent.flush() is True

    assert GPUSample.objects.count() == 95
    assert (agent.stats.delivered, agent.stats.dropped_rejected) == (95, 1)
    assert not GPUSample.objects.filter(gpu__uuid=REAL[3], ts=start + timedelta(seconds=150)).exists()


def serve_token_reviews(kube: Any, token: str) -> None:
    """The API server's TokenReview: `token` is the agent pod's on NODE, for the audience gpuplane."""
    def review(request: RecordedRequest) -> Reply:
        spec = request.body["spec"]
        if spec["token"] == token and "gpuplane" in spec["audiences"]:
            return Reply(201, k8s.token_review(token, node=NODE))
        return Reply(201, k8s.token_review(spec["token"], authenticated=False))

    kube.on("POST", "/apis/authentication.k8s.io/v1/tokenreviews", handler=review)


@pytest.mark.django_db(transaction=True)
def test_a_fresh_node_whose_agent_holds_only_its_service_account_token(
        kube, cluster, live_server, monkeypatch, capsys, settings, tmp_path):
    watching.forget_mirrors()
    serve_the_node(kube)
    sync_inventory(cluster)
    node = Node.objects.get(name=NODE)
    assert list(node.gpus.order_by("index").values_list("uuid", flat=True)) == [f"GPU-{NODE}-{i}" for i in range(8)]
    # The server talks to the cluster as it does in a pod: its own credential, from a kubeconfig.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{kube.url}'}}}}]\n"
        "users: [{name: gpuplane, user: {token: gpuplane-server-token}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: gpuplane}}]\n"
    )
    settings.GPUPLANE_CLUSTER, settings.GPUPLANE_KUBECONFIG = "kubernetes", str(kubeconfig)
    # What the kubelet mounts into the agent's pod (deploy/base/agent.yaml); no key anywhere.
    token = k8s.service_account_jwt(datetime.now(UTC).timestamp() + 600, aud=["gpuplane"])
    (tmp_path / "token").write_text(token)
    serve_token_reviews(kube, token)
    monkeypatch.delenv("GPUPLANE_AGENT_TOKEN", raising=False)
    FakeNVML(h100s_one_in_mig_mode()).install(monkeypatch)

    call_command("gpuplane_agent", "--server", live_server.url, "--token-file", str(tmp_path / "token"),
                 "--node", NODE, "--once")

    assert "Posted 8 sample(s) for node gpu-node-1" in capsys.readouterr().out
    assert list(node.gpus.order_by("index").values_list("uuid", flat=True)) == REAL
    assert sorted(GPUSample.objects.values_list("gpu__uuid", flat=True)) == sorted(REAL)
    assert not NodeAgentToken.objects.exists()
    reviews = [r for r in kube.requests if r.path.endswith("/tokenreviews")]
    # The GPU report and the batch: one review, with gpuplane's credential, the next post from the cache.
    assert len(reviews) == 1 and reviews[0].headers["authorization"] == "Bearer gpuplane-server-token"
    assert [r.path for r in kube.requests if r.method == "POST"] == ["/apis/authentication.k8s.io/v1/tokenreviews"]
