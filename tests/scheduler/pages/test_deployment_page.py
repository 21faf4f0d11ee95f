"""The deployment pages: a deployment with its placement and decision matrix; deleting it.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

import json
import re

import pytest

from scheduler.plugin_labels import plugin_label
from tests.scheduler.pages.deploying import deploy, free_partitions
from tests.scheduler.pages.html_tables import row_texts, table_rows

pytestmark = pytest.mark.django_db

# The balanced profile's plugins as the page names them, and the unit of each raw value, for a
# low-priority request (PriorityPower then measures the GPU's power draw in W).
BALANCED_IN_WORDS = {
    "PowerEfficiency": ("Power efficiency", "TFLOPS per kW"),
    "WorkloadAffinity": ("Workload affinity", "% match"),
    "LeastUtilized": ("Least utilized", "% idle"),
    "PriorityPower": ("Priority: power", "W"),
    "PartitionCompat": ("Partition fit", "% of the unit"),
    "FragmentationGradient": ("Fragmentation", "milli-GPU"),
    "SharingPlan": ("Sharing plan", "planned step"),
}

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
    assert placements[0] == "Replica Node GPU model GPUs Sharing Share Memory MIG profile Status Workload"
    gpu = placement.gpu_indexes[0]
    slot_gb = placement.memory_mib / 1024  # an MPS slot pins the GPU's memory / R
    assert placements[1].startswith(f"0 {placement.node.name} A100-SXM4-40GB GPU {gpu} mps 50 % {slot_gb:g} GB —")
    # The decision names the rule that sized the placement.
    assert "Sizing rule: MPS: 50 % by default for a medium model, at least 8 GB -&gt; 50 % of GPU" in body

    rows = table_rows(body, "data-matrix-table")
    header, body_rows = rows[0][1], rows[1:]
    # Columns heaviest weight first, equal weights by name; balanced: 4.5 SharingPlan,
    # 3.0 FragmentationGradient, 0.30 PowerEfficiency ... 0.10 PartitionCompat.
    weights = sorted(matrix["weights"].items(), key=lambda item: (-item[1], item[0]))
    plugins = [plugin for plugin, _ in weights]
    assert plugins[:3] == ["SharingPlan", "FragmentationGradient", "PowerEfficiency"]
    assert plugins[-1] == "PartitionCompat"
    assert set(plugins) == set(BALANCED_IN_WORDS)
    assert header == (
        "Rank Node Verdict " + " ".join(f"{BALANCED_IN_WORDS[p][0]} × {w:.2f}" for p, w in weights) + " Total of 100"
    )
    # The request's host resources (the batch workload type's defaults), and the scale of a total.
    assert "Requests 4 CPU and 16 GiB of host memory per replica" in body
    # One table row per stored matrix row, in the stored order.
    assert [attrs["data-node"] for attrs, _ in body_rows] == [row["node"] for row in matrix["rows"]]
    chosen = [(attrs, text) for attrs, text in body_rows if attrs["data-verdict"] == "chosen"]
    assert len(chosen) == 1
    attrs, text = chosen[0]
    assert attrs["data-node"] == placement.node.name == matrix["node"]
    assert "matrix__row--chosen" in attrs["class"]
    stored = next(row for row in matrix["rows"] if row["node"] == matrix["node"])
    # Rank, node, facts, verdict, then each plugin's weighted score, raw value in its unit and
    # normalized score, then the total.
    cells = " ".join(
        f"{s['weighted']:.1f} {plugin_label(s['plugin'], 'low').raw_text(s['raw'])} · {s['normalized']}/100"
        for s in sorted(stored["scores"], key=lambda s: plugins.index(s["plugin"]))
    )
    facts = stored["facts"]
    host = f" · {facts['cpu_free_milli'] / 1000:g} CPU, {facts['memory_free_mib'] / 1024:g} GiB free"
    assert text == (
        f"{stored['rank']} {stored['node']} A100-SXM4-40GB · {facts['sharing_mode']}{host} chosen {cells} "
        f"{stored['total']:.1f}"
    )
    assert abs(sum(s["weighted"] for s in stored["scores"]) - stored["total"]) < 0.01
    rejected = [(a, t) for a, t in body_rows if a["data-verdict"] == "rejected"]
    stored_rejected = [row for row in matrix["rows"] if not row["feasible"]]
    assert len(rejected) == len(stored_rejected) > 0
    for (_attrs, text), row in zip(rejected, stored_rejected, strict=True):
        assert text.endswith(f"rejected {row['reason']} — {row['detail']}" if row["detail"] else f"rejected {row['reason']}")
    # The profile and its weights.
    assert f"<code>{matrix['profile']}</code>" in body
    for plugin, weight in matrix["weights"].items():
        assert f'<span class="weights__plugin">{BALANCED_IN_WORDS[plugin][0]}</span> × {weight:.2f}' in body
    # The chart's data: the stored matrix, embedded for static/js/decision_matrix.js.
    script = re.search(rf'<script id="decision-matrix-0-{decision.pk}" type="application/json">(.*?)</script>', body, re.S)
    assert json.loads(script.group(1)) == matrix
    assert f'data-decision-chart="decision-matrix-0-{decision.pk}"' in body
    labels = re.search(rf'<script id="decision-matrix-0-{decision.pk}-labels" type="application/json">(.*?)</script>', body, re.S)
    assert json.loads(labels.group(1)) == {p: {"title": t, "unit": u} for p, (t, u) in BALANCED_IN_WORDS.items()}
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


# ---- the scaling timeline ------------------------------------------------------------------------


def test_the_page_shows_the_scaling_timeline_with_the_metrics_behind_each_decision(viewer_client, demo):
    from scheduler.services import autoscaling

    deployment = deploy(name="chat", namespace="inference")
    response = viewer_client.get(f"/deployments/{deployment.pk}/")
    assert "No scaling event yet." in response.content.decode()
    autoscaling.scale_deployment(deployment, 2, user="otto-operator")
    response = viewer_client.get(f"/deployments/{deployment.pk}/")
    html = response.content.decode()
    assert 'data-scaling-timeline="scaling-timeline-data"' in html and "js/scaling_timeline.js" in html
    data = json.loads(re.search(r'<script id="scaling-timeline-data" type="application/json">(.*?)</script>',
                                html, re.S).group(1))
    assert [(e["action"], e["replicas"], e["policy"]) for e in data] == [("up", 2, "manual")]
    rows = row_texts(html, "scaling-table")
    assert any("up 1 → 2" in row and "otto-operator" in row for row in rows), rows
