"""`/api/v1/nodes/`: shape, derived usage, filters, ordering, paging, bad input, query count."""
from __future__ import annotations

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from nodes.models import GPU, Node
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["results"]]


@pytest.fixture
def fleet(db) -> dict[str, Node]:
    """Four nodes with different models, modes, states and allocation."""
    nodes = {
        "h100-a": make_node("h100-a", "H100-SXM5-80GB", 2, "exclusive"),
        "h100-b.example.com": make_node("h100-b.example.com", "H100-SXM5-80GB", 2, "mig", cordoned=True),
        "a100-c": make_node("a100-c", "A100-SXM4-40GB", 4, "mps", sharing_replicas=4, gpu_memory_mib=40960),
        "l4-d": make_node("l4-d", "L4", 1, "timeslice", ready=False, gpu_memory_mib=23034),
    }
    # h100-a: both GPUs partly allocated, so it has no wholly free GPU.
    GPU.objects.filter(node__name="h100-a").update(allocated_milli=500, allocated_memory_mib=40000)
    # a100-c: one of four GPUs allocated.
    GPU.objects.filter(node__name="a100-c", index=0).update(allocated_milli=1000, allocated_memory_mib=40960)
    return nodes


def test_it_lists_nodes_with_every_contract_field(viewer_api, fleet):
    response = viewer_api.get("/api/v1/nodes/")

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 4
    assert body["next"] is None and body["previous"] is None
    # Default ordering is by name.
    assert [row["name"] for row in body["results"]] == ["a100-c", "h100-a", "h100-b.example.com", "l4-d"]
    row = body["results"][0]
    assert set(row) >= {
        "name", "url", "gpu_model", "gpu_count", "sharing_mode", "sharing_replicas", "ready", "cordoned",
        "labels", "taints", "gpu_product", "cpu_allocatable_milli", "memory_allocatable_mib",
        "applied_config", "applied_config_name", "desired_config", "desired_config_name", "last_seen",
        "gpus_allocated", "utilization_pct",
    }
    assert row["url"] == "http://testserver/api/v1/nodes/a100-c/"
    assert (row["gpu_model"], row["gpu_count"], row["sharing_mode"], row["sharing_replicas"]) == (
        "A100-SXM4-40GB", 4, "mps", 4,
    )


def test_it_derives_gpus_allocated_and_mean_utilization(viewer_api, fleet):
    now = timezone.now()
    GPU.objects.filter(uuid="GPU-a100-c-0").update(utilization_pct=90.0, sampled_at=now)
    GPU.objects.filter(uuid="GPU-a100-c-1").update(utilization_pct=30.0, sampled_at=now)
    # GPUs 2 and 3 have no telemetry: the mean is over reporting GPUs only, (90 + 30) / 2 = 60.

    rows = {row["name"]: row for row in viewer_api.get("/api/v1/nodes/").json()["results"]}

    assert rows["a100-c"]["utilization_pct"] == pytest.approx(60.0)
    assert rows["a100-c"]["gpus_allocated"] == 1
    assert rows["h100-a"]["gpus_allocated"] == 2
    assert rows["l4-d"]["gpus_allocated"] == 0
    # No GPU has reported: null, not 0.
    assert rows["h100-a"]["utilization_pct"] is None


def test_it_retrieves_a_node_by_a_dotted_name(viewer_api, fleet):
    response = viewer_api.get("/api/v1/nodes/h100-b.example.com/")

    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "h100-b.example.com"
    assert body["cordoned"] is True
    assert body["schedulable"] is False
    assert body["gpus_allocated"] == 0


def test_it_shows_labels_and_taints_as_stored(viewer_api, db):
    make_node(
        "tainted",
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )

    body = viewer_api.get("/api/v1/nodes/tainted/").json()

    assert body["labels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert body["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_it_answers_404_for_an_unknown_node(viewer_api, fleet):
    assert viewer_api.get("/api/v1/nodes/nope/").status_code == 404


@pytest.mark.parametrize(
    "query, expected",
    [
        ("q=H100", ["h100-a", "h100-b.example.com"]),
        ("q=example.COM", ["h100-b.example.com"]),
        ("gpu_model=L4", ["l4-d"]),
        ("gpu_model=L4&gpu_model=A100-SXM4-40GB", ["a100-c", "l4-d"]),
        ("gpu_model=B200", []),
        ("sharing_mode=mig", ["h100-b.example.com"]),
        ("sharing_mode=mps&sharing_mode=timeslice", ["a100-c", "l4-d"]),
        ("ready=false", ["l4-d"]),
        ("ready=true", ["a100-c", "h100-a", "h100-b.example.com"]),
        ("cordoned=1", ["h100-b.example.com"]),
        ("cordoned=no", ["a100-c", "h100-a", "l4-d"]),
        ("has_free_gpu=true", ["a100-c", "h100-b.example.com", "l4-d"]),
        ("has_free_gpu=false", ["h100-a"]),
        ("ready=true&cordoned=false&sharing_mode=exclusive&sharing_mode=mps", ["a100-c", "h100-a"]),
    ],
)
def test_it_filters_nodes(viewer_api, fleet, query, expected):
    assert names(viewer_api.get(f"/api/v1/nodes/?{query}")) == expected


def test_it_keeps_usage_figures_when_filtering_on_free_gpus(viewer_api, fleet):
    GPU.objects.filter(uuid="GPU-a100-c-1").update(utilization_pct=40.0)

    rows = viewer_api.get("/api/v1/nodes/?has_free_gpu=true").json()["results"]

    a100 = next(row for row in rows if row["name"] == "a100-c")
    assert (a100["gpus_allocated"], a100["utilization_pct"]) == (1, pytest.approx(40.0))


@pytest.mark.parametrize(
    "ordering, expected",
    [
        ("-name", ["l4-d", "h100-b.example.com", "h100-a", "a100-c"]),
        ("gpu_count,name", ["l4-d", "h100-a", "h100-b.example.com", "a100-c"]),
        ("-gpus_allocated,name", ["h100-a", "a100-c", "h100-b.example.com", "l4-d"]),
        ("-gpu_model,-name", ["l4-d", "h100-b.example.com", "h100-a", "a100-c"]),
    ],
)
def test_it_orders_nodes(viewer_api, fleet, ordering, expected):
    assert names(viewer_api.get(f"/api/v1/nodes/?ordering={ordering}")) == expected


def test_it_orders_by_utilization(viewer_api, fleet):
    GPU.objects.filter(node__name="h100-a").update(utilization_pct=10.0)
    GPU.objects.filter(node__name="l4-d").update(utilization_pct=80.0)
    GPU.objects.filter(node__name="a100-c").update(utilization_pct=50.0)

    ordered = names(viewer_api.get("/api/v1/nodes/?ordering=-utilization_pct"))

    # h100-b.example.com has no telemetry; where NULL sorts depends on the database.
    assert [name for name in ordered if name != "h100-b.example.com"] == ["l4-d", "a100-c", "h100-a"]


def test_it_pages_with_limit_and_offset(viewer_api, fleet):
    body = viewer_api.get("/api/v1/nodes/?limit=2&offset=1").json()

    assert body["count"] == 4
    assert [row["name"] for row in body["results"]] == ["h100-a", "h100-b.example.com"]
    assert body["next"] == "http://testserver/api/v1/nodes/?limit=2&offset=3"
    assert body["previous"] == "http://testserver/api/v1/nodes/?limit=2"


def test_it_returns_an_empty_page_past_the_end(viewer_api, fleet):
    body = viewer_api.get("/api/v1/nodes/?offset=999999999999999999").json()

    assert body["count"] == 4
    assert body["results"] == []


def test_it_caps_limit_at_500(viewer_api, db):
    Node.objects.bulk_create(Node(name=f"bulk-{i:04d}") for i in range(501))

    body = viewer_api.get("/api/v1/nodes/?limit=100000").json()

    assert body["count"] == 501
    assert len(body["results"]) == 500
    assert body["next"] == "http://testserver/api/v1/nodes/?limit=500&offset=500"


def test_it_defaults_to_pages_of_50(viewer_api, db):
    Node.objects.bulk_create(Node(name=f"bulk-{i:03d}") for i in range(51))

    body = viewer_api.get("/api/v1/nodes/").json()

    assert len(body["results"]) == 50
    assert body["next"] == "http://testserver/api/v1/nodes/?limit=50&offset=50"


@pytest.mark.parametrize(
    "query, field",
    [
        ("ready=maybe", "ready"),
        ("ready=2", "ready"),
        ("ready=", "ready"),  # the schema's boolean has no empty value: leave the parameter out
        ("cordoned=yes please", "cordoned"),
        ("has_free_gpu=perhaps", "has_free_gpu"),
        ("sharing_mode=bogus", "sharing_mode"),
        ("sharing_mode=mig&sharing_mode=bogus", "sharing_mode"),
        ("sharing_mode=MIG", "sharing_mode"),
        ("sharing_mode=", "sharing_mode"),
        ("q=%00", "q"),
        ("gpu_model=%00", "gpu_model"),
        ("ordering=bogus", "ordering"),
        ("ordering=name,-password", "ordering"),
        ("ordering=labels", "ordering"),
        ("limit=-3", "limit"),
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("limit=1.5", "limit"),
        ("limit=%2B5", "limit"),
        ("limit=1e3", "limit"),
        ("limit=" + "9" * 30, "limit"),
        ("offset=-1", "offset"),
        ("offset=two", "offset"),
        ("offset=" + "9" * 30, "offset"),
    ],
)
def test_it_answers_400_with_the_field_for_bad_values(viewer_api, fleet, query, field):
    response = viewer_api.get(f"/api/v1/nodes/?{query}")

    assert response.status_code == 400, response.content
    messages = response.json()[field]
    assert messages and all(isinstance(message, str) for message in messages)


def test_it_refuses_unknown_parameters_naming_them(viewer_api, fleet):
    response = viewer_api.get("/api/v1/nodes/?colour=blue&ready=true")

    assert response.status_code == 400
    assert list(response.json()) == ["colour"]
    assert "Unknown query parameter" in response.json()["colour"][0]


def test_it_lists_nodes_in_a_constant_number_of_queries(viewer_api, db, django_assert_max_num_queries):
    for i in range(12):
        make_node(f"n{i:02d}", gpu_count=4)
    GPU.objects.update(utilization_pct=25.0, allocated_milli=250)

    # role lookup + count + one page query with the GPU aggregates + the page's MIG GPUs and their
    # instances (applied_config; the second is skipped when there are none): no query per node.
    with django_assert_max_num_queries(5):
        response = viewer_api.get("/api/v1/nodes/?has_free_gpu=false&ordering=-utilization_pct")

    assert response.status_code == 200, response.content[:300]
    body = response.json()
    assert body["count"] == 12
    assert all(row["gpus_allocated"] == 4 for row in body["results"])


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_it_is_read_only(method, operator, api, fleet):
    api.force_authenticate(operator)

    response = getattr(api, method)("/api/v1/nodes/h100-a/", {"name": "renamed"}, format="json")

    assert response.status_code == 405
    assert Node.objects.filter(name="h100-a").exists()


def test_it_renders_the_browsable_api_with_its_filter_form(viewer, fleet):
    client = APIClient()
    client.force_login(viewer)

    response = client.get("/api/v1/nodes/?sharing_mode=mig", HTTP_ACCEPT="text/html")

    assert response.status_code == 200
    html = response.content.decode()
    assert "h100-b.example.com" in html
    # The filter form offers the models present in the fleet (choices read lazily for HTML only).
    assert 'value="A100-SXM4-40GB"' in html


@pytest.mark.parametrize("query", ["ordering=bogus", "limit=-3", "ready=maybe", "offset=x"])
def test_it_answers_400_in_the_browsable_api_too(viewer, fleet, query):
    client = APIClient()
    client.force_login(viewer)

    response = client.get(f"/api/v1/nodes/?{query}", HTTP_ACCEPT="text/html")

    assert response.status_code == 400


# Any text at all, NUL and other control characters included (surrogates cannot be sent in a URL).
ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
PARAMETERS = {
    "/api/v1/nodes/": ["q", "gpu_model", "sharing_mode", "ready", "cordoned", "has_free_gpu"],
    "/api/v1/gpus/": [
        "node", "model", "mig_enabled", "utilization_pct__gte", "utilization_pct__lte", "min_free_memory_mib",
    ],
    "/api/v1/partitions/": ["node", "gpu", "kind", "mig_profile", "free"],
}


@pytest.mark.parametrize("url", list(PARAMETERS))
def test_it_never_answers_500_to_any_query_value(viewer_api, fleet, url):
    names_for_url = [*PARAMETERS[url], "ordering", "limit", "offset"]

    @hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.dictionaries(st.sampled_from(names_for_url), ANY_TEXT, min_size=1, max_size=3))
    def check(query: dict[str, str]) -> None:
        response = viewer_api.get(url, query)
        assert response.status_code in (200, 400), (query, response.content)
        if response.status_code == 400:
            assert set(response.json()) <= set(query)

    check()
