"""The deployment pages: who may see and deploy, the list and its filters, the deploy form's
errors and its "nothing fits" answer, and a deployment's decision matrix.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from nodes.demo import load_demo_cluster
from nodes.models import Partition
from scheduler import services
from scheduler.models import Decision, Deployment
from scheduler.views import matrix_table, rejection_rows

pytestmark = pytest.mark.django_db

LOW_BATCH = {  # the seed's scenario 2: lands on an A100 at 50 % MPS
    "name": "embedder", "model": "bge-large", "memory_gb": "8", "gpu_count": "1", "replicas": "1",
    "workload_type": "batch", "priority": "low", "latency_slo_ms": "", "namespace": "search",
    "labels": "team=search\ntier=canary", "sharing": "auto", "enable_gpu_selection": "on",
}


# ---- helpers ---------------------------------------------------------------------------------------


class _Rows(HTMLParser):
    """Each <tr> of one table (found by an attribute) as (its attributes, its visible text)."""

    def __init__(self, table_attr: str) -> None:
        super().__init__()
        self.table_attr = table_attr
        self.depth = 0  # >0 while inside the wanted table
        self.rows: list[tuple[dict[str, str], str]] = []
        self._row: tuple[dict[str, str], list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "table" and (self.depth or self.table_attr in attributes):
            self.depth += 1
        elif tag == "tr" and self.depth:
            self._row = (attributes, [])

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1
        elif tag == "tr" and self._row is not None:
            text = " ".join(" ".join(self._row[1]).split())
            self.rows.append((self._row[0], text.replace(" ,", ",").replace(" ;", ";")))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None:
            self._row[1].append(data)


def table_rows(html: str, table_attr: str) -> list[tuple[dict[str, str], str]]:
    """Rows (header row included) of the first table carrying `table_attr` (an id or data- attribute)."""
    parser = _Rows(table_attr)
    parser.feed(html)
    return parser.rows


def row_texts(html: str, table_id: str) -> list[str]:
    """Visible text of each row of the table with id `table_id`."""
    match = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S)
    assert match, f"no table #{table_id}"
    return [text for _, text in table_rows(match.group(0), "id")]


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def demo() -> None:
    load_demo_cluster()


@pytest.fixture
def operator_client(operator) -> Client:
    return signed_in(operator)


@pytest.fixture
def viewer_client(viewer) -> Client:
    return signed_in(viewer)


def deploy(**fields: Any) -> Deployment:
    """A deployment through the real services (validation, decision, reservation, simulated cluster)."""
    return services.deploy(services.DeploySpec(**{"model": "llama-3-8b", "memory_gb": 8, **fields}))


def free_partitions() -> int:
    return Partition.objects.filter(placement__isnull=True, pod="").count()


# ---- access ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/deployments/", "/deployments/new/", "/deployments/1/"])
def test_it_sends_anonymous_users_to_the_sign_in_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


@pytest.mark.parametrize("url", ["/deployments/", "/deployments/new/"])
def test_it_refuses_users_without_a_role(outsider, url):
    response = signed_in(outsider).get(url)
    assert response.status_code == 403
    assert "You have no role in gpuplane" in response.content.decode()


def test_a_viewer_reads_the_list_but_gets_no_deploy_link(viewer_client):
    response = viewer_client.get("/deployments/")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'href="/deployments/new/"' not in body
    # The main navigation marks the page.
    assert '<a href="/deployments/" aria-current="page">Deployments</a>' in body


def test_an_operator_gets_the_deploy_link(operator_client):
    assert 'href="/deployments/new/"' in operator_client.get("/deployments/").content.decode()


def test_a_viewer_may_not_open_or_submit_the_deploy_form(viewer_client, demo):
    response = viewer_client.get("/deployments/new/")
    assert response.status_code == 403
    assert "this page needs the <strong>operator</strong> role" in response.content.decode()
    assert viewer_client.post("/deployments/new/", LOW_BATCH).status_code == 403
    assert not Deployment.objects.exists()


def test_a_viewer_may_not_delete(viewer_client, demo):
    deployment = deploy(name="app")
    assert viewer_client.get(f"/deployments/{deployment.pk}/delete/").status_code == 403
    assert viewer_client.post(f"/deployments/{deployment.pk}/delete/").status_code == 403
    deployment.refresh_from_db()
    assert deployment.status == "placed"
    body = viewer_client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f'href="/deployments/{deployment.pk}/delete/"' not in body


def test_an_unknown_deployment_is_a_404(viewer_client):
    assert viewer_client.get("/deployments/999999/").status_code == 404


# ---- list and filters ------------------------------------------------------------------------------


@pytest.fixture
def three_deployments(demo) -> dict[str, Deployment]:
    """search/embedder (placed, 2 replicas), ml/chat (placed, 40 GB high), ml/old (deleted)."""
    embedder = deploy(name="embedder", namespace="search", replicas=2, priority="low", workload_type="batch")
    chat = deploy(name="chat", namespace="ml", memory_gb=40, priority="high", latency_slo_ms=100)
    old = deploy(name="old", namespace="ml", memory_gb=2)
    services.delete_deployment(old)
    return {"embedder": embedder, "chat": chat, "old": old}


def test_the_list_shows_each_deployment_with_its_request_and_nodes(viewer_client, three_deployments):
    body = viewer_client.get("/deployments/").content.decode()
    rows = row_texts(body, "deployment-table")
    assert rows[0] == ("Name Namespace Model Memory GPUs × replicas Priority Sharing Status Placed on Created")
    by_name = {row.split()[0]: row for row in rows[1:]}
    assert set(by_name) == {"embedder", "chat", "old"}
    chat_nodes = sorted({p.node.name for p in three_deployments["chat"].placements.all()})
    assert len(chat_nodes) == 1 and chat_nodes[0].startswith("h100-")  # seed scenario 1: an H100
    assert by_name["chat"].startswith(f"chat ml llama-3-8b 40 GB 1 × 1 High Automatic Placed {chat_nodes[0]}")
    embedder_nodes = sorted({p.node.name for p in three_deployments["embedder"].placements.all()})
    assert f"embedder search llama-3-8b 8 GB 1 × 2 Low Automatic Placed {', '.join(embedder_nodes)}" in by_name["embedder"]
    # A deleted deployment keeps its row and says so; its placements are kept as history.
    assert "Deleted" in by_name["old"]
    assert f'href="/deployments/{three_deployments["chat"].pk}/"' in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=placed", {"embedder", "chat"}),
        ("status=deleted", {"old"}),
        ("namespace=ml", {"chat", "old"}),
        ("namespace=ml&status=placed", {"chat"}),
        ("status=running", set()),
    ],
)
def test_the_list_filters_by_status_and_namespace(viewer_client, three_deployments, query, expected):
    response = viewer_client.get(f"/deployments/?{query}")
    assert {d.name for d in response.context["deployments"]} == expected
    if not expected:
        assert "No deployments match these filters." in response.content.decode()


def test_an_unknown_filter_value_is_an_error_and_shows_nothing(viewer_client, three_deployments):
    response = viewer_client.get("/deployments/?status=bogus")
    assert response.status_code == 200
    assert list(response.context["deployments"]) == []
    assert "Select a valid choice. bogus is not one of the available choices." in response.content.decode()


def test_the_namespace_filter_offers_the_namespaces_in_use(viewer_client, three_deployments):
    body = viewer_client.get("/deployments/").content.decode()
    select = re.search(r'<select name="namespace".*?</select>', body, re.S).group(0)
    assert re.findall(r'<option value="([^"]*)"', select) == ["", "ml", "search"]


# ---- the deploy form -------------------------------------------------------------------------------


def test_the_form_explains_each_sharing_mode_honestly(operator_client):
    body = operator_client.get("/deployments/new/").content.decode()
    for field in ("name", "model", "memory_gb", "gpu_count", "replicas", "workload_type", "priority",
                  "latency_slo_ms", "namespace", "labels", "enable_gpu_selection"):
        assert f'name="{field}"' in body
    assert body.count('name="sharing"') == 6
    assert "a 50 % share needs R &lt;= 2 and a 25 % share R &lt;= 4" in body  # uniform MPS: 100/R
    assert "no memory and no fault isolation" in body  # time-slicing
    assert "hardware isolation of compute, memory and faults" in body  # MIG
    # Help texts are tied to their fields for screen readers.
    assert 'aria-describedby="id_memory_gb_helptext"' in body


def test_a_valid_form_deploys_and_lands_on_the_deployment_page(operator_client, operator, demo):
    response = operator_client.post("/deployments/new/", LOW_BATCH, follow=True)
    deployment = Deployment.objects.get()
    assert response.redirect_chain == [(f"/deployments/{deployment.pk}/", 302)]
    assert (deployment.name, deployment.namespace, deployment.memory_mib) == ("embedder", "search", 8192)
    assert (deployment.priority, deployment.workload_type, deployment.status) == ("low", "batch", "placed")
    assert deployment.labels == {"team": "search", "tier": "canary"}
    assert deployment.created_by == operator
    placement = deployment.placements.get()
    # Seed scenario 2: 8 GB LOW batch -> an A100 at 50 % MPS.
    assert placement.node.gpu_model == "A100-SXM4-40GB"
    assert (placement.sharing, placement.share_milli) == ("mps", 500)
    body = response.content.decode()
    assert f"Deployed search/embedder: placed on {placement.node.name}" in body


def test_field_errors_are_shown_and_nothing_is_stored(operator_client, demo):
    before = free_partitions()
    data = {**LOW_BATCH, "name": "Bad_Name", "memory_gb": "0", "gpu_count": "two", "labels": "team=a\nnot a label"}
    response = operator_client.post("/deployments/new/", data)
    assert response.status_code == 200
    form = response.context["form"]
    # The services' (= the API's) rules: a DNS label, memory in (0, 4096] GB.
    assert form.errors["name"] == [
        "Enter a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit."
    ]
    assert form.errors["memory_gb"] == ["Enter a number of GB greater than 0 and at most 4096."]
    assert form.errors["gpu_count"] == ["Enter a whole number."]
    assert form.errors["labels"] == ["Line 2: write one label a line as key=value."]
    body = response.content.decode()
    assert '<p class="field__error">Enter a whole number.</p>' in body
    assert 'value="Bad_Name"' in body  # what was typed is kept
    assert not Deployment.objects.exists()
    assert free_partitions() == before


def test_cross_field_rules_of_the_api_apply_to_the_form(operator_client, demo):
    data = {**LOW_BATCH, "gpu_count": "2", "sharing": "timeslice", "labels": "gpuplane.io/owner=me"}
    form = operator_client.post("/deployments/new/", data).context["form"]
    assert form.errors["sharing"][0].startswith("A replica of 2 GPUs takes whole GPUs: timeslice gives one GPU")
    assert form.errors["labels"] == ["Label key 'gpuplane.io/owner' is set by gpuplane."]
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("field", "typed", "value"),
    [
        ("namespace", "-bad-", "-bad-"),
        ("name", " embedder", " embedder"),  # not trimmed: the API refuses it too
        ("replicas", "0", 0),
        ("latency_slo_ms", "0", 0),
        ("memory_gb", "5000", 5000.0),
        ("gpu_count", "17", 17),
        ("model", "x" * 201, "x" * 201),
    ],
)
def test_the_form_refuses_what_the_api_validator_refuses_with_its_message(operator_client, demo, field, typed, value):
    form = operator_client.post("/deployments/new/", {**LOW_BATCH, field: typed}).context["form"]
    assert list(form.errors) == [field]
    spec = services.DeploySpec(**{"name": "embedder", "model": "bge", "memory_gb": 8, field: value})
    with pytest.raises(ValidationError) as raised:
        services.validate_spec(spec)
    assert form.errors[field] == raised.value.message_dict[field]
    assert not Deployment.objects.exists()


def test_when_nothing_fits_the_form_shows_the_diagnosis_and_stores_nothing(operator_client, demo):
    before = free_partitions()
    data = {**LOW_BATCH, "name": "huge", "memory_gb": "200"}
    response = operator_client.post("/deployments/new/", data)
    assert response.status_code == 200
    body = response.content.decode()
    message = response.context["no_capacity"]
    assert message.startswith("0/12 nodes are available: ")
    assert "insufficient GPU memory" in message
    assert "Nothing fits this request; nothing was deployed" in body
    assert message in body
    # The compact table: one row per reason, the counts adding up to the 12 nodes.
    rows = row_texts(body, "rejection-table")
    assert rows[0] == "Reason Nodes For example"
    reasons = response.context["rejections"]
    assert sum(r.count for r in reasons) == 12
    assert len(rows) == len(reasons) + 1
    for row, reason in zip(rows[1:], reasons, strict=True):
        assert row.startswith(f"{reason.reason} {reason.count} ")
        for detail, nodes in reason.examples:
            assert f"{', '.join(nodes)} — {detail}" in row
    # The form comes back filled in, and nothing was stored or reserved.
    assert 'value="huge"' in body
    assert not Deployment.objects.exists()
    assert not Decision.objects.exists()
    assert free_partitions() == before


def test_a_cluster_refusal_lands_on_the_failed_deployment(operator_client, demo, monkeypatch):
    from nodes.cluster.base import ClusterError
    from nodes.cluster.simulated import SimulatedCluster

    def refuse(self, spec):
        raise ClusterError("admission webhook denied the pod")

    monkeypatch.setattr(SimulatedCluster, "create_workload", refuse)
    before = free_partitions()
    response = operator_client.post("/deployments/new/", LOW_BATCH, follow=True)
    deployment = Deployment.objects.get()
    assert response.redirect_chain == [(f"/deployments/{deployment.pk}/", 302)]
    assert deployment.status == "failed"
    body = response.content.decode()
    assert "search/embedder failed: the cluster refused workload" in body
    assert "admission webhook denied the pod" in body
    assert free_partitions() == before


# ---- the deployment page ---------------------------------------------------------------------------


def test_the_page_shows_the_placement_and_the_decision_matrix(viewer_client, demo):
    deployment = deploy(name="embedder", namespace="search", priority="low", workload_type="batch")
    placement = deployment.placements.get()
    decision = deployment.decisions.get()
    matrix = decision.matrix
    response = viewer_client.get(f"/deployments/{deployment.pk}/")
    assert response.status_code == 200
    body = response.content.decode()

    placements = row_texts(body, "placement-table")
    assert placements[0] == "Replica Node GPU model GPUs Sharing Share MIG profile Status Workload"
    gpu = placement.gpu_indexes[0]
    assert placements[1].startswith(f"0 {placement.node.name} A100-SXM4-40GB GPU {gpu} mps 50 % —")

    rows = table_rows(body, "data-matrix-table")
    header, body_rows = rows[0][1], rows[1:]
    # Columns heaviest weight first; balanced: 0.30 PowerEfficiency ... 0.10 PartitionCompat.
    weights = sorted(matrix["weights"].items(), key=lambda item: (-item[1], item[0]))
    plugins = [plugin for plugin, _ in weights]
    assert plugins[0] == "PowerEfficiency" and plugins[-1] == "PartitionCompat"
    assert header == "Rank Node Verdict " + " ".join(f"{p} × {w:.2f}" for p, w in weights) + " Total"
    # One table row per stored matrix row, in the stored order.
    assert [attrs["data-node"] for attrs, _ in body_rows] == [row["node"] for row in matrix["rows"]]
    chosen = [(attrs, text) for attrs, text in body_rows if attrs["data-verdict"] == "chosen"]
    assert len(chosen) == 1
    attrs, text = chosen[0]
    assert attrs["data-node"] == placement.node.name == matrix["node"]
    assert "matrix__row--chosen" in attrs["class"]
    stored = next(row for row in matrix["rows"] if row["node"] == matrix["node"])
    # Rank, node, facts, verdict, then each plugin's weighted and raw score, then the total.
    cells = " ".join(
        f"{s['weighted']:.1f} raw {s['raw']} · {s['normalized']}"
        for s in sorted(stored["scores"], key=lambda s: plugins.index(s["plugin"]))
    )
    assert text == (
        f"{stored['rank']} {stored['node']} A100-SXM4-40GB · {stored['facts']['sharing_mode']} chosen {cells} "
        f"{stored['total']:.1f}"
    )
    rejected = [(a, t) for a, t in body_rows if a["data-verdict"] == "rejected"]
    stored_rejected = [row for row in matrix["rows"] if not row["feasible"]]
    assert len(rejected) == len(stored_rejected) > 0
    for (attrs, text), row in zip(rejected, stored_rejected, strict=True):
        assert text.endswith(f"rejected {row['reason']} — {row['detail']}" if row["detail"] else f"rejected {row['reason']}")
    # The profile and its weights.
    assert f"<code>{matrix['profile']}</code>" in body
    for plugin, weight in matrix["weights"].items():
        assert f'<span class="weights__plugin">{plugin}</span> × {weight:.2f}' in body
    # The chart's data: the stored matrix, embedded for static/js/decision_matrix.js.
    script = re.search(rf'<script id="decision-matrix-0-{decision.pk}" type="application/json">(.*?)</script>', body, re.S)
    assert json.loads(script.group(1)) == matrix
    assert f'data-decision-chart="decision-matrix-0-{decision.pk}"' in body
    assert "js/decision_matrix.js" in body and "vendor/plotly/plotly.min.js" in body


def test_an_operator_deletes_after_confirming(operator_client, demo):
    before = free_partitions()
    deployment = deploy(name="app")
    assert free_partitions() < before
    page = operator_client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert f'href="/deployments/{deployment.pk}/delete/"' in page
    confirm = operator_client.get(f"/deployments/{deployment.pk}/delete/")
    assert "Delete default/app?" in confirm.content.decode()
    deployment.refresh_from_db()
    assert deployment.status == "placed"  # GET only asks

    response = operator_client.post(f"/deployments/{deployment.pk}/delete/", follow=True)
    assert response.redirect_chain == [(f"/deployments/{deployment.pk}/", 302)]
    deployment.refresh_from_db()
    assert deployment.status == "deleted"
    assert free_partitions() == before
    body = response.content.decode()
    assert "Deleted default/app; its GPUs are released." in body
    assert f'href="/deployments/{deployment.pk}/delete/"' not in body  # nothing left to delete


# ---- the matrix layout (pure) ----------------------------------------------------------------------


def _score(plugin: str, raw: int, normalized: int, weight: float) -> dict[str, Any]:
    return {"plugin": plugin, "raw": raw, "normalized": normalized, "weight": weight, "weighted": normalized * weight}


# Stored JSON may come back in any key order (PostgreSQL's jsonb sorts keys): the layout must not care.
TRUNCATED = {
    "outcome": "placed", "node": "b", "profile": "balanced", "message": "placed on b",
    "weights": {"PowerEfficiency": 0.4, "LeastUtilized": 0.6},
    "classification": {"reason": "8 GB is medium: prefers A100, MPS 50 %"},
    "feasible_nodes": 7,  # 2 kept below
    "diagnosis": {"total_nodes": 20, "available": 7,
                  "rejected": {"not ready": 1, "cordoned": 3, "insufficient GPU memory": 9}},
    "rows": [
        # Stored in another plugin order than the weights: columns must still line up.
        {"node": "b", "feasible": True, "rank": 1, "total": 88.0,
         "scores": [_score("PowerEfficiency", 900, 70, 0.4), _score("LeastUtilized", 100, 100, 0.6)]},
        {"node": "a", "feasible": True, "rank": 2, "total": 60.0, "scores": [_score("LeastUtilized", 100, 100, 0.6)]},
        {"node": "x", "feasible": False, "reason": "insufficient GPU memory", "detail": "needs 8192 MiB"},
        {"node": "y", "feasible": False, "reason": "insufficient GPU memory", "detail": "needs 8192 MiB"},
        {"node": "z", "feasible": False, "reason": "cordoned", "detail": ""},
    ],
}


def test_matrix_table_aligns_scores_with_the_profile_columns():
    table = matrix_table(TRUNCATED, {"b": "/nodes/b/"})
    assert table.plugins == ("LeastUtilized", "PowerEfficiency")
    b, a = table.rows[0], table.rows[1]
    assert [cell.weighted for cell in b.scores] == [60.0, 28.0]  # 100 x 0.6, 70 x 0.4
    assert a.scores[1] is None  # no PowerEfficiency score stored: a gap, not a shifted column
    assert (b.verdict, a.verdict, table.rows[2].verdict) == ("chosen", "feasible", "rejected")
    assert (b.node_url, a.node_url) == ("/nodes/b/", None)


def test_matrix_table_counts_what_the_truncated_matrix_left_out():
    table = matrix_table(TRUNCATED, {})
    assert table.hidden_feasible == 5  # 7 feasible, 2 kept
    # 9 - 2 example rows, 3 - 1, 1 - 0: every one of the 20 nodes is accounted for.
    assert table.hidden_rejected == (("insufficient GPU memory", 7), ("cordoned", 2), ("not ready", 1))
    assert table.hidden_rejected_text == "7 insufficient GPU memory, 2 cordoned, 1 not ready"
    assert table.hidden_rejected_n + table.hidden_feasible + len(table.rows) == 20


def test_no_row_is_chosen_unless_the_replica_was_placed():
    table = matrix_table({**TRUNCATED, "outcome": "default-scheduler"}, {})
    assert [row.verdict for row in table.rows[:2]] == ["feasible", "feasible"]


def test_rejection_rows_keep_the_diagnosis_order_and_examples():
    rows = rejection_rows(TRUNCATED)
    assert [(r.reason, r.count) for r in rows] == [("insufficient GPU memory", 9), ("cordoned", 3), ("not ready", 1)]
    assert rows[0].examples == (("needs 8192 MiB", ("x", "y")),)  # grouped by their detail
    assert rows[1].examples == (("", ("z",)),)
    assert rows[2].examples == ()


def test_the_page_lists_counts_of_rejected_nodes_beyond_the_kept_examples(viewer_client, demo):
    deployment = deploy(name="app")
    decision = deployment.decisions.get()
    decision.matrix = {**TRUNCATED, "node": decision.matrix["node"]}
    decision.save()
    body = viewer_client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "5 more feasible nodes scored lower (not kept)." in body
    assert "10 more nodes rejected: 7 insufficient GPU memory, 2 cordoned, 1 not ready." in body


def test_a_node_gone_from_the_inventory_is_shown_without_a_link(viewer_client, demo):
    deployment = deploy(name="app")
    decision = deployment.decisions.get()
    gone = {"node": "gone-node", "feasible": False, "reason": "cordoned", "detail": ""}
    decision.matrix = {**decision.matrix, "rows": [*decision.matrix["rows"], gone]}
    decision.save()
    body = viewer_client.get(f"/deployments/{deployment.pk}/").content.decode()
    chosen = decision.matrix["node"]
    assert f'<a href="/nodes/{chosen}/">{chosen}</a>' in body
    assert 'data-node="gone-node"' in body and 'href="/nodes/gone-node/"' not in body


def test_a_replica_handed_to_the_default_scheduler_is_shown_as_such(viewer_client, demo):
    deployment = deploy(name="plain", enable_gpu_selection=False)
    assert deployment.placements.get().node is None
    body = viewer_client.get(f"/deployments/{deployment.pk}/").content.decode()
    placements = row_texts(body, "placement-table")
    assert placements[1].startswith("0 default scheduler — — default-scheduler — —")
    assert "GPU selection is disabled for this request" in body
    assert "GPU selection skipped" in body  # the decision's outcome badge
    assert "data-decision-chart" not in body  # nothing was scored, so no chart
    listed = row_texts(viewer_client.get("/deployments/").content.decode(), "deployment-table")
    assert "1 via default scheduler" in listed[1]
