"""`/api/v1/gpus/`: shape, lookup by UUID, filters, ordering, bad input, query count."""
from __future__ import annotations

import pytest
from django.utils import timezone

from nodes.models import GPU
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


def uuids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["uuid"] for row in response.json()["results"]]


@pytest.fixture
def gpus(db) -> None:
    """Two H100s on `h1`, one MIG-enabled; two A100-40GB on `a2.example.com`; telemetry on three."""
    make_node("h1", "H100-SXM5-80GB", 2)
    make_node("a2.example.com", "A100-SXM4-40GB", 2, gpu_memory_mib=40960)
    now = timezone.now()
    GPU.objects.filter(uuid="GPU-h1-0").update(
        mig_enabled=True, utilization_pct=95.0, memory_used_mib=70000, power_w=650.5, temperature_c=71.0, sampled_at=now
    )
    GPU.objects.filter(uuid="GPU-h1-1").update(utilization_pct=40.0, allocated_milli=500, allocated_memory_mib=60000)
    GPU.objects.filter(uuid="GPU-a2.example.com-0").update(utilization_pct=10.0, allocated_memory_mib=10000)
    # GPU-a2.example.com-1: no telemetry, nothing allocated.


def test_it_lists_gpus_with_every_contract_field(viewer_api, gpus):
    body = viewer_api.get("/api/v1/gpus/").json()

    assert body["count"] == 4
    # Ordered by node name, then index.
    assert [row["uuid"] for row in body["results"]] == [
        "GPU-a2.example.com-0", "GPU-a2.example.com-1", "GPU-h1-0", "GPU-h1-1",
    ]
    row = body["results"][2]
    assert row["url"] == "http://testserver/api/v1/gpus/GPU-h1-0/"
    assert row["node"] == "h1"
    assert (row["index"], row["model"], row["memory_mib"], row["mig_enabled"]) == (0, "H100-SXM5-80GB", 81920, True)
    assert (row["utilization_pct"], row["memory_used_mib"], row["power_w"], row["temperature_c"]) == (
        95.0, 70000, 650.5, 71.0,
    )
    assert row["sampled_at"] is not None
    assert {"allocated_milli", "allocated_memory_mib"} <= set(row)


def test_it_shows_allocation_and_what_is_left(viewer_api, gpus):
    body = viewer_api.get("/api/v1/gpus/GPU-h1-1/").json()

    assert (body["allocated_milli"], body["allocated_memory_mib"]) == (500, 60000)
    # 1000 - 500 and 81920 - 60000
    assert (body["free_milli"], body["free_memory_mib"]) == (500, 21920)


def test_it_shows_null_telemetry_before_the_first_sample(viewer_api, gpus):
    body = viewer_api.get("/api/v1/gpus/GPU-a2.example.com-1/").json()

    assert body["node"] == "a2.example.com"
    assert [body[key] for key in ("utilization_pct", "memory_used_mib", "power_w", "temperature_c", "sampled_at")] == [
        None, None, None, None, None,
    ]


def test_it_answers_404_for_an_unknown_uuid(viewer_api, gpus):
    assert viewer_api.get("/api/v1/gpus/GPU-nope/").status_code == 404


@pytest.mark.parametrize(
    "query, expected",
    [
        ("node=h1", ["GPU-h1-0", "GPU-h1-1"]),
        ("node=h1&node=a2.example.com", ["GPU-a2.example.com-0", "GPU-a2.example.com-1", "GPU-h1-0", "GPU-h1-1"]),
        ("node=ghost", []),
        ("model=A100-SXM4-40GB", ["GPU-a2.example.com-0", "GPU-a2.example.com-1"]),
        ("mig_enabled=true", ["GPU-h1-0"]),
        ("mig_enabled=false&node=h1", ["GPU-h1-1"]),
        ("utilization_pct__gte=40", ["GPU-h1-0", "GPU-h1-1"]),
        ("utilization_pct__lte=40", ["GPU-a2.example.com-0", "GPU-h1-1"]),
        ("utilization_pct__gte=20&utilization_pct__lte=50", ["GPU-h1-1"]),
        ("utilization_pct__gte=0", ["GPU-a2.example.com-0", "GPU-h1-0", "GPU-h1-1"]),  # null never matches
        ("utilization_pct__gte=95.5", []),
        # free memory: a2-0 40960-10000=30960, a2-1 40960, h1-0 81920, h1-1 81920-60000=21920
        ("min_free_memory_mib=30960", ["GPU-a2.example.com-0", "GPU-a2.example.com-1", "GPU-h1-0"]),
        ("min_free_memory_mib=30961", ["GPU-a2.example.com-1", "GPU-h1-0"]),
        ("min_free_memory_mib=0", ["GPU-a2.example.com-0", "GPU-a2.example.com-1", "GPU-h1-0", "GPU-h1-1"]),
        ("min_free_memory_mib=81921", []),
    ],
)
def test_it_filters_gpus(viewer_api, gpus, query, expected):
    assert uuids(viewer_api.get(f"/api/v1/gpus/?{query}")) == expected


def test_it_orders_gpus(viewer_api, gpus):
    ordered = uuids(viewer_api.get("/api/v1/gpus/?ordering=-utilization_pct&utilization_pct__gte=0"))

    assert ordered == ["GPU-h1-0", "GPU-h1-1", "GPU-a2.example.com-0"]


def test_it_orders_by_node_name_descending(viewer_api, gpus):
    ordered = uuids(viewer_api.get("/api/v1/gpus/?ordering=-node__name,index"))

    assert ordered == ["GPU-h1-0", "GPU-h1-1", "GPU-a2.example.com-0", "GPU-a2.example.com-1"]


@pytest.mark.parametrize(
    "query, field",
    [
        ("utilization_pct__gte=abc", "utilization_pct__gte"),
        ("utilization_pct__gte=NaN", "utilization_pct__gte"),
        ("utilization_pct__gte=Infinity", "utilization_pct__gte"),
        ("utilization_pct__lte=-1", "utilization_pct__lte"),
        ("utilization_pct__lte=100.1", "utilization_pct__lte"),
        ("utilization_pct__gte=1e400", "utilization_pct__gte"),
        ("min_free_memory_mib=lots", "min_free_memory_mib"),
        ("min_free_memory_mib=1.5", "min_free_memory_mib"),
        ("min_free_memory_mib=-1", "min_free_memory_mib"),
        ("min_free_memory_mib=" + "9" * 25, "min_free_memory_mib"),
        ("mig_enabled=sometimes", "mig_enabled"),
        ("node=%00", "node"),
        ("model=a%00b", "model"),
        ("ordering=uuid", "ordering"),
        ("ordering=node", "ordering"),
        ("limit=-3", "limit"),
    ],
)
def test_it_answers_400_with_the_field_for_bad_values(viewer_api, gpus, query, field):
    response = viewer_api.get(f"/api/v1/gpus/?{query}")

    assert response.status_code == 400, response.content
    assert response.json()[field]


def test_it_lists_gpus_in_a_constant_number_of_queries(viewer_api, db, django_assert_max_num_queries):
    for i in range(8):
        make_node(f"n{i}", gpu_count=4)

    # role lookup + count + one page query joined to the node.
    with django_assert_max_num_queries(3):
        response = viewer_api.get("/api/v1/gpus/")

    assert response.status_code == 200, response.content[:300]
    body = response.json()
    assert body["count"] == 32
    assert body["results"][0]["node"] == "n0"


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_it_is_read_only(method, admin_user, api, gpus):
    api.force_authenticate(admin_user)

    response = getattr(api, method)("/api/v1/gpus/GPU-h1-0/", {"index": 7}, format="json")

    assert response.status_code == 405
    assert GPU.objects.get(uuid="GPU-h1-0").index == 0
