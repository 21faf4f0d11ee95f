"""Node agents authenticated by their projected ServiceAccount token (nodes.agent_identity): the
cluster's TokenReview says whose it is and which node its pod runs on; the agent may post for that
node only. The cluster here is the simulated one, which answers for the tokens it issued, as the
API server does; tests/nodes/kubernetes/test_agent_zero_touch.py runs the same path against the
Kubernetes backend."""
from __future__ import annotations

import time

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from nodes.agent_identity import REVIEWS, AgentIdentity, ReviewCache
from nodes.cluster.sim import SimulatedCluster
from nodes.models import GPU, GPUSample, NodeAgentToken
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

TELEMETRY = "/api/v1/telemetry/"


@pytest.fixture
def nodes(db):
    return make_node("n1", gpu_count=1), make_node("n2", gpu_count=1)


@pytest.fixture
def cluster(settings) -> SimulatedCluster:
    return SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE)


def issue(cluster: SimulatedCluster, node: str | None = "n1", *, namespace: str = "gpuplane",
          name: str = "gpuplane-agent", audiences: tuple[str, ...] = ("gpuplane",), expiration_s: int = 600) -> str:
    """What the kubelet mounts into an agent pod on `node` (None: a token of no pod)."""
    return cluster.issue_service_account_token(namespace, name, node=node or "", audiences=list(audiences),
                                               expiration_s=expiration_s)


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def batch(node: str = "n1") -> dict:
    return {"node": node, "samples": [{"gpu_uuid": f"GPU-{node}-0", "ts": timezone.now().isoformat(),
                                       "utilization_pct": 5.0}]}


def report(uuid: str) -> dict:
    return {"gpus": [{"index": 0, "uuid": uuid, "product": "NVIDIA H100 80GB HBM3", "mig_enabled": False}]}


def test_the_token_of_node_a_posts_node_as_telemetry_and_gpu_report_with_no_key_issued(nodes, cluster):
    agent = bearer(issue(cluster, "n1"))

    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201
    response = agent.post("/api/v1/nodes/n1/gpu-report/", report("GPU-real-n1"), format="json")

    assert response.status_code == 200, response.content
    assert GPUSample.objects.get().source == "agent"
    assert GPU.objects.get(node__name="n1").uuid == "GPU-real-n1"
    assert not NodeAgentToken.objects.exists()


def test_the_token_of_node_a_may_not_post_for_node_b(nodes, cluster):
    agent = bearer(issue(cluster, "n1"))

    telemetry = agent.post(TELEMETRY, batch("n2"), format="json")
    gpu_report = agent.post("/api/v1/nodes/n2/gpu-report/", report("GPU-real-n2"), format="json")

    assert telemetry.status_code == 403
    assert telemetry.json() == {"detail": "This agent token may only post telemetry for node 'n1'."}
    assert gpu_report.status_code == 403
    assert not GPUSample.objects.exists() and GPU.objects.get(node__name="n2").uuid == "GPU-n2-0"


@pytest.mark.parametrize(("token", "detail"), [
    ({"audiences": ("vault",)}, "The cluster did not authenticate this token (invalid bearer token, token "
                                "audiences don't match the requested audiences)."),
    ({"name": "default"}, "This token belongs to 'system:serviceaccount:gpuplane:default', not to the node "
                          "agent ('system:serviceaccount:gpuplane:gpuplane-agent')."),
    ({"namespace": "team-a"}, "This token belongs to 'system:serviceaccount:team-a:gpuplane-agent', not to the "
                              "node agent ('system:serviceaccount:gpuplane:gpuplane-agent')."),
    ({"node": None}, "This token names no node (a pod-bound token on Kubernetes 1.30 or later does); give this "
                     "node's agent a per-node key (manage.py create_agent_token)."),
])
def test_a_token_that_is_not_the_agents_of_a_node_is_a_401(nodes, cluster, token, detail):
    response = bearer(issue(cluster, **token)).post(TELEMETRY, batch("n1"), format="json")

    assert response.status_code == 401
    assert response.json() == {"detail": detail}
    assert response["WWW-Authenticate"] == 'Bearer realm="gpuplane-agent"'
    assert not GPUSample.objects.exists() and len(REVIEWS) == 0  # a refusal is not cached


def test_a_token_the_cluster_did_not_issue_is_a_401(nodes, cluster, settings, tmp_path):
    another_cluster = SimulatedCluster(tmp_path / "another-cluster.json")

    response = bearer(issue(another_cluster, "n1")).post(TELEMETRY, batch("n1"), format="json")

    assert response.status_code == 401
    assert response.json() == {"detail": "The cluster did not authenticate this token (invalid bearer token)."}


def test_a_cluster_that_cannot_be_asked_is_a_503_which_the_agent_sends_again(nodes, cluster):
    cluster.inject_fault("review_token", "apiserver timeout")

    response = bearer(issue(cluster, "n1")).post(TELEMETRY, batch("n1"), format="json")

    assert response.status_code == 503
    assert response.json() == {"detail": "The agent's token cannot be checked with the cluster now: apiserver timeout"}


def test_a_review_is_reused_within_its_ttl_and_asked_again_after(nodes, cluster, settings, monkeypatch):
    settings.GPUPLANE_AGENT_REVIEW_TTL_S = 120
    now = [time.time()]
    monkeypatch.setattr(REVIEWS, "clock", lambda: now[0])
    agent = bearer(issue(cluster, "n1"))
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201
    # The next review would fail: a post that asked the cluster again would be refused.
    cluster.inject_fault("review_token", "apiserver timeout")

    now[0] += 119
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201  # from the cache
    now[0] += 1
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 503  # asked, and the fault fired
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201  # asked again, fresh review

    assert GPUSample.objects.count() == 3


def test_a_review_is_never_trusted_past_the_tokens_expiry(nodes, cluster, settings, monkeypatch):
    settings.GPUPLANE_AGENT_REVIEW_TTL_S = 86_400
    now = [time.time()]
    monkeypatch.setattr(REVIEWS, "clock", lambda: now[0])
    agent = bearer(issue(cluster, "n1", expiration_s=600))
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201
    cluster.inject_fault("review_token", "apiserver timeout")

    now[0] += 590
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 201
    now[0] += 10  # the token's exp: the cluster is asked (and would say "expired")
    assert agent.post(TELEMETRY, batch("n1"), format="json").status_code == 503


def test_the_cache_is_bounded_and_keeps_the_most_recently_used():
    now = [0.0]
    cache = ReviewCache(max_entries=2, clock=lambda: now[0])
    for name in ("a", "b"):
        cache.put(name, AgentIdentity(name, "agent"), deadline=60)
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", AgentIdentity("c", "agent"), deadline=60)

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (AgentIdentity("a", "agent"), None,
                                                                AgentIdentity("c", "agent"))
    now[0] = 60
    assert cache.get("a") is None and len(cache) == 1
