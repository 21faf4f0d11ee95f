"""The deployment pages: how a stored decision matrix is laid out (pure), and a truncated one on the page.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

from typing import Any

import pytest

from scheduler.matrix_view import matrix_table, rejection_rows
from tests.scheduler.pages.deploying import deploy
from tests.scheduler.pages.html_tables import row_texts

pytestmark = pytest.mark.django_db

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
    assert table.hidden_rejected_text == ("7 nodes have insufficient GPU memory, 2 nodes are cordoned, "
                                         "1 node is ruled out: not ready")
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
    assert ("10 more nodes rejected: 7 nodes have insufficient GPU memory, 2 nodes are cordoned, "
            "1 node is ruled out: not ready.") in body


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
