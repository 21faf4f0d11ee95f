"""The deployment pages: the deploy form, its errors and its "nothing fits" answer.

Deploys go through the real services on the 12-node demo cluster (nodes.demo) in the simulator,
so the matrix on the page is the one the placement engine stored.
"""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from scheduler import services
from scheduler.models import Decision, Deployment
from tests.scheduler.pages.deploying import LOW_BATCH, free_partitions
from tests.scheduler.pages.html_tables import row_texts

pytestmark = pytest.mark.django_db

# ---- the deploy form -------------------------------------------------------------------------------


def test_the_form_explains_each_sharing_mode_honestly(operator_client):
    body = operator_client.get("/deployments/new/").content.decode()
    for field in ("name", "model", "memory_gb", "gpu_count", "replicas", "workload_type", "priority",
                  "latency_slo_ms", "namespace", "labels", "sharing", "share_percent", "cpu", "memory",
                  "enable_gpu_selection"):
        assert f'name="{field}"' in body
    assert body.count('name="sharing"') == 6
    # Each mode sizes by its own unit: the old rule (the class's share demanded of every mode) is gone.
    assert "a 50 % share needs R &lt;= 2" in body  # uniform MPS: 100/R
    assert "a MIG instance or a time-slice replica by memory" in body  # auto
    assert "any replica whose GPU has enough memory left" in body  # time-slicing
    assert "No memory and no fault isolation" in body
    assert "it also decides the default share" not in body
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


def test_a_stated_compute_share_is_stored_and_sizes_the_placement(operator_client, demo):
    # 8 GB on MPS defaults to 50 %; a stated 25 % fits an R=4 slot.
    data = {**LOW_BATCH, "sharing": "mps", "share_percent": "25"}
    response = operator_client.post("/deployments/new/", data, follow=True)
    deployment = Deployment.objects.get()
    assert deployment.share_percent == 25
    assert deployment.placements.get().share_milli == 250
    body = response.content.decode()
    assert "25&nbsp;% as requested" in body
    assert "Sizing rule: MPS: 25 % as requested, at least 8 GB -&gt; 25 % of GPU" in body


def test_cpu_and_memory_are_stored_and_shown_and_empty_means_the_workload_types_default(operator_client, demo):
    response = operator_client.post("/deployments/new/", {**LOW_BATCH, "cpu": "500m", "memory": "2Gi"}, follow=True)
    deployment = Deployment.objects.get()
    assert (deployment.cpu_milli, deployment.host_memory_mib) == (500, 2048)
    assert "500m CPU, 2Gi per replica" in response.content.decode()
    operator_client.post("/deployments/new/", {**LOW_BATCH, "name": "defaults", "cpu": "", "memory": ""})
    defaults = Deployment.objects.get(name="defaults")
    assert (defaults.cpu_milli, defaults.host_memory_mib) == services.HOST_DEFAULTS["batch"]


def test_an_empty_compute_share_means_the_modes_own_rule(operator_client, demo):
    operator_client.post("/deployments/new/", {**LOW_BATCH, "share_percent": ""})
    assert Deployment.objects.get().share_percent is None


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
    assert form.errors["memory_gb"] == ["Enter a number of GB from 1/1024 (1 MiB) to 4096."]
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
        ("share_percent", "0", 0),
        ("share_percent", "101", 101),
        ("cpu", "8 cores", "8 cores"),
        ("cpu", "0", "0"),
        ("memory", "64GB", "64GB"),
        ("memory", "17Ti", "17Ti"),
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
    assert message.startswith("No GPU of this cluster can hold 200 GB")
    assert "0/12 nodes are available: 12 nodes have insufficient GPU memory" in message
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


def test_when_nothing_fits_the_form_leads_with_the_reason_and_a_suggestion_that_works(operator_client, demo):
    data = {**LOW_BATCH, "name": "huge", "memory_gb": "120", "gpu_count": "1"}
    response = operator_client.post("/deployments/new/", data)
    body = response.content.decode()

    suggestion = response.context["suggestion"]
    assert suggestion["changes"] == {"gpu_count": 2}
    assert f"<strong>{suggestion['text']}</strong>" in body
    # The answer speaks GB (the form's help text may define the unit in MiB; the answer does not use it).
    answer = " ".join(row_texts(body, "rejection-table")) + " " + suggestion["text"]
    assert "fewer GPUs" not in body and "MiB" not in answer
    # The dominant reason is the table's first row.
    assert row_texts(body, "rejection-table")[1].startswith("insufficient GPU memory 12 ")

    # The "deploy with this change" button posts the same request with the suggested change.
    fields = response.context["suggested_fields"]
    assert 'data-apply-suggestion' in body and '<input type="hidden" name="gpu_count" value="2">' in body
    posted: dict[str, list[str]] = {}
    for name, value in fields:
        posted.setdefault(name, []).append(value)
    assert posted == {**{name: [value] for name, value in data.items()}, "gpu_count": ["2"]}
    followed = operator_client.post("/deployments/new/", posted)
    assert followed.status_code == 302 and Deployment.objects.get().gpu_count == 2


def test_a_cluster_refusal_lands_on_the_failed_deployment(operator_client, demo, monkeypatch):
    from nodes.cluster.base import ClusterError
    from nodes.cluster.sim import SimulatedCluster

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
