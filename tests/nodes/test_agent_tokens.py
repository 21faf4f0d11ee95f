"""Node agent tokens: made by `create_agent_token`, stored as digests, good for one node's telemetry only."""
from __future__ import annotations

import hashlib
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from gpuplane.roles import RolePermission, role_of
from nodes.authentication import NodeAgent, issue_agent_token
from nodes.models import GPUSample, Node, NodeAgentToken
from tests.conftest import PASSWORD
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

TELEMETRY = "/api/v1/telemetry/"


@pytest.fixture
def n1(db) -> Node:
    return make_node("n1", gpu_count=1)


@pytest.fixture
def agent_key(n1) -> str:
    _, key = issue_agent_token(n1)
    return key


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def one_sample(node: str = "n1", uuid: str = "GPU-n1-0") -> dict:
    return {"node": node, "samples": [{"gpu_uuid": uuid, "ts": timezone.now().isoformat(), "utilization_pct": 5.0}]}


# --- the command --------------------------------------------------------------------------------


def test_the_command_prints_a_new_key_once_and_stores_only_its_digest(n1):
    out, err = StringIO(), StringIO()

    call_command("create_agent_token", "n1", stdout=out, stderr=err)

    key = out.getvalue().strip()
    assert len(key) >= 43 and "\n" not in key  # token_urlsafe(32), alone on stdout for scripts
    token = NodeAgentToken.objects.get()
    assert token.node == n1
    assert token.key_digest == hashlib.sha256(key.encode()).hexdigest()
    assert token.prefix == key[:8]
    assert key not in {token.key_digest, token.prefix, str(token)}
    assert "cannot be shown again" in err.getvalue()
    assert key not in err.getvalue()


def test_the_command_makes_a_different_key_each_time(n1):
    keys = set()
    for _ in range(2):
        out = StringIO()
        call_command("create_agent_token", "n1", stdout=out, stderr=StringIO())
        keys.add(out.getvalue().strip())

    assert len(keys) == 2
    assert NodeAgentToken.objects.filter(node=n1).count() == 2


def test_the_command_refuses_an_unknown_node(db):
    with pytest.raises(CommandError, match="No node named 'ghost'"):
        call_command("create_agent_token", "ghost", stdout=StringIO(), stderr=StringIO())
    assert not NodeAgentToken.objects.exists()


# --- authentication -----------------------------------------------------------------------------


def test_a_key_from_the_command_posts_telemetry(n1):
    out = StringIO()
    call_command("create_agent_token", "n1", stdout=out, stderr=StringIO())

    response = bearer(out.getvalue().strip()).post(TELEMETRY, one_sample(), format="json")

    assert response.status_code == 201
    assert GPUSample.objects.get().source == "agent"


def test_a_revoked_token_is_a_401(n1, agent_key):
    NodeAgentToken.objects.update(revoked=True)

    response = bearer(agent_key).post(TELEMETRY, one_sample(), format="json")

    assert response.status_code == 401
    assert response.json() == {"detail": "This agent token has been revoked."}
    assert GPUSample.objects.count() == 0


@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-real-key", "Bearer", "Bearer two words", "bearer not-a-real-key"],
)
def test_an_unknown_or_malformed_bearer_header_is_a_401(n1, agent_key, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    assert client.post(TELEMETRY, one_sample(), format="json").status_code == 401
    assert client.get("/api/v1/nodes/").status_code == 401


def test_an_agent_token_may_not_post_for_another_node(n1, agent_key):
    make_node("n2", gpu_count=1)

    response = bearer(agent_key).post(TELEMETRY, one_sample("n2", "GPU-n2-0"), format="json")

    assert response.status_code == 403
    assert response.json() == {"detail": "This agent token may only post telemetry for node 'n1'."}
    assert GPUSample.objects.count() == 0


@pytest.mark.parametrize(
    "method, url",
    [
        ("get", "/api/v1/nodes/"),
        ("get", "/api/v1/nodes/n1/"),
        ("get", "/api/v1/gpus/"),
        ("get", "/api/v1/gpus/GPU-n1-0/"),
        ("get", "/api/v1/partitions/"),
        ("post", "/api/v1/nodes/"),
        ("get", "/api/schema/"),
    ],
)
def test_an_agent_token_is_refused_everywhere_else_with_403(n1, agent_key, method, url):
    response = getattr(bearer(agent_key), method)(url)

    assert response.status_code == 403


def test_an_agent_holds_no_role(n1):
    token, _ = issue_agent_token(n1)
    agent = NodeAgent(token.node.name, token.node)

    assert agent.is_authenticated
    assert role_of(agent) is None
    assert not agent.has_perm("nodes.view_node")

    class Request:
        method = "GET"
        user = agent

    assert RolePermission().has_permission(Request(), view=None) is False


def test_user_tokens_keep_working_beside_agent_tokens(n1, agent_key, viewer):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=viewer)[1]}")

    assert client.get("/api/v1/nodes/").status_code == 200
    assert client.post(TELEMETRY, one_sample(), format="json").status_code == 403  # a viewer may not post
    assert bearer(agent_key).post(TELEMETRY, one_sample(), format="json").status_code == 201


def test_it_records_when_a_token_was_last_used_at_most_once_in_five_minutes(n1, agent_key):
    token = NodeAgentToken.objects.get()
    assert token.last_used_at is None

    bearer(agent_key).get("/api/v1/nodes/")
    first = NodeAgentToken.objects.get().last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=10)

    bearer(agent_key).get("/api/v1/nodes/")
    assert NodeAgentToken.objects.get().last_used_at == first  # within five minutes: no write

    NodeAgentToken.objects.update(last_used_at=first - timedelta(minutes=6))
    bearer(agent_key).get("/api/v1/nodes/")
    assert NodeAgentToken.objects.get().last_used_at > first


# --- admin --------------------------------------------------------------------------------------


@pytest.fixture
def superuser_client(db):
    client = APIClient()
    client.force_login(User.objects.create_superuser("root", password=PASSWORD))
    return client


def test_the_admin_lists_telemetry_read_only_and_revokes_tokens(superuser_client, n1, agent_key):
    bearer(agent_key).post(TELEMETRY, one_sample(), format="json")
    token = NodeAgentToken.objects.get()

    for url in ("/admin/nodes/gpusample/", "/admin/nodes/gpusamplerollup/", "/admin/nodes/nodeagenttoken/"):
        assert superuser_client.get(url).status_code == 200, url
    assert superuser_client.get("/admin/nodes/gpusample/add/").status_code == 403
    assert superuser_client.get("/admin/nodes/nodeagenttoken/add/").status_code == 403

    response = superuser_client.post(
        "/admin/nodes/nodeagenttoken/", {"action": "revoke", "_selected_action": [token.pk]}, follow=True
    )

    assert response.status_code == 200
    assert NodeAgentToken.objects.get().revoked is True
    assert bearer(agent_key).post(TELEMETRY, one_sample(), format="json").status_code == 401
