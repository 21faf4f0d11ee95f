"""The rollout's event log: its own audit events and its nodes' (state moves, evictions, labels
switched, restores), newest first with the node's name, the latest 100; the same list on the page
and at /api/v1/rollouts/<id>/events/, which the live script reads."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from lifecycle.audit import record
from rollouts.choices import NodeState
from rollouts.events import EVENT_LIMIT
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate, RolloutNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout() -> RollingUpdate:
    update = RollingUpdate.objects.create(name="mps4", config={"mode": "mps", "replicas": 4, "mig_layout": None})
    for number, name in enumerate(("gpu-a", "gpu-b"), start=1):
        RolloutNode.objects.create(rollout=update, node_name=name, batch_index=number)
    return update


def test_the_events_api_lists_the_rollouts_and_its_nodes_events_newest_first_with_the_node(viewer_api, rollout):
    other = RollingUpdate.objects.create(name="other", config={})
    other_step = RolloutNode.objects.create(rollout=other, node_name="gpu-a", batch_index=1)
    a = rollout.nodes.get(node_name="gpu-a")
    assert ROLLOUT_STATES.move(rollout, "running", actor="otto", reason="started")
    assert NODE_STATES.move(a, NodeState.PREWARMING, actor="system:rollouts", reason="moving its workloads elsewhere first")
    record("rolloutnode.pod_evicted", a, actor="system:rollouts", reason="ml/chat-0 evicted through the Eviction API")
    assert NODE_STATES.move(other_step, NodeState.PREWARMING)  # another rollout's node of the same name: not listed

    response = viewer_api.get(f"/api/v1/rollouts/{rollout.pk}/events/")

    assert response.status_code == 200, response.content
    events = response.json()
    assert [(e["verb"], e["node"], e["actor"]) for e in events] == [
        ("rolloutnode.pod_evicted", "gpu-a", "system:rollouts"),
        ("rolloutnode.prewarming", "gpu-a", "system:rollouts"),
        ("rollingupdate.running", "", "otto"),
    ]
    assert events[0]["reason"] == "ml/chat-0 evicted through the Eviction API"
    assert set(events[0]) == {"id", "at", "actor", "verb", "node", "reason"}
    assert viewer_api.get("/api/v1/rollouts/999/events/").status_code == 404


def test_the_event_log_keeps_the_latest_100(viewer_api, rollout):
    b = rollout.nodes.get(node_name="gpu-b")
    for number in range(EVENT_LIMIT + 20):
        record("rolloutnode.eviction_blocked", b, actor="system:rollouts", reason=f"attempt {number}")

    events = viewer_api.get(f"/api/v1/rollouts/{rollout.pk}/events/").json()

    assert EVENT_LIMIT == 100 and len(events) == 100
    assert events[0]["reason"] == f"attempt {EVENT_LIMIT + 19}" and events[-1]["reason"] == "attempt 20"


def test_the_page_shows_the_same_log_with_a_node_column_and_points_the_live_script_at_the_api(viewer, rollout):
    a = rollout.nodes.get(node_name="gpu-a")
    assert ROLLOUT_STATES.move(rollout, "running", reason="started")
    record("rolloutnode.labels_switched", a, actor="system:rollouts", reason="to MPS R=4")
    client = Client()
    client.force_login(viewer)

    body = client.get(f"/rollouts/{rollout.pk}/").content.decode()

    events = re.search(r'<table class="table" id="rollout-events">(.*?)</table>', body, re.S).group(1)
    assert "<th scope=\"col\">Node</th>" in events
    rows = re.findall(r"<tr><td><time[^>]*>[^<]*</time></td><td>([^<]*)</td><td>([^<]*)</td><td><code>([^<]*)</code>",
                      events)
    assert rows == [("gpu-a", "system:rollouts", "rolloutnode.labels_switched"),
                    ("—", "system", "rollingupdate.running")]
    assert f'data-events-url="/api/v1/rollouts/{rollout.pk}/events/"' in body
