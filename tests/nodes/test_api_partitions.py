"""`/api/v1/partitions/`: shape, occupancy, filters, bad input, query count."""
from __future__ import annotations

import pytest

from nodes.models import GPU, Partition
from scheduler.models import Deployment, Placement
from tests.nodes.factories import hold_partition, make_node, make_partition

pytestmark = pytest.mark.django_db


def slots(response) -> list[tuple[str, int]]:
    """(GPU uuid, slot) for each row, in response order."""
    assert response.status_code == 200, response.content
    return [(row["gpu"], row["slot"]) for row in response.json()["results"]]


@pytest.fixture
def layout(db) -> dict[str, Partition]:
    """`ex`: 1 exclusive partition (held by a pod); `mg`: MIG 3g.40gb + 2g.20gb on GPU 0;
    `mp`: 2 MPS slots of 500 milli on GPU 0, slot 1 held by a placement."""
    make_node("ex", gpu_count=1)
    mig = make_node("mg", gpu_count=1, sharing_mode="mig", partitions=False)
    mps = make_node("mp", gpu_count=1, sharing_mode="mps", partitions=False, sharing_replicas=2)
    Partition.objects.filter(gpu__uuid="GPU-ex-0").update(pod="serving/llama-0")
    mig_gpu = GPU.objects.get(node=mig)
    mig_gpu.mig_enabled = True
    mig_gpu.save()
    make_partition(
        mig_gpu, "mig", slot=0, share_milli=429, memory_mib=40960, mig_profile="3g.40gb", mig_start=0, mig_size=4
    )
    make_partition(
        mig_gpu, "mig", slot=1, share_milli=286, memory_mib=20480, mig_profile="2g.20gb", mig_start=4, mig_size=2
    )
    mps_gpu = GPU.objects.get(node=mps)
    make_partition(mps_gpu, "mps", slot=0, share_milli=500, memory_mib=40960)
    held = make_partition(mps_gpu, "mps", slot=1, share_milli=500, memory_mib=40960)
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=16000)
    placement = Placement.objects.create(deployment=deployment, node=mps)
    hold_partition(held, placement)
    return {"held": held, "placement": placement}


def test_it_lists_partitions_with_every_contract_field(viewer_api, layout):
    body = viewer_api.get("/api/v1/partitions/").json()

    assert body["count"] == 5
    assert [(row["node"], row["slot"]) for row in body["results"]] == [
        ("ex", 0), ("mg", 0), ("mg", 1), ("mp", 0), ("mp", 1),
    ]
    mig = body["results"][1]
    assert set(mig) >= {
        "id", "gpu", "node", "kind", "slot", "share_milli", "memory_mib", "mig_profile", "mig_start",
        "mig_size", "free", "pod", "placement",
    }
    assert (mig["gpu"], mig["kind"], mig["mig_profile"], mig["mig_start"], mig["mig_size"]) == (
        "GPU-mg-0", "mig", "3g.40gb", 0, 4,
    )
    assert (mig["share_milli"], mig["memory_mib"]) == (429, 40960)
    assert mig["url"] == f"http://testserver/api/v1/partitions/{mig['id']}/"


def test_it_shows_who_holds_a_partition(viewer_api, layout):
    rows = {(row["node"], row["slot"]): row for row in viewer_api.get("/api/v1/partitions/").json()["results"]}

    assert (rows["ex", 0]["free"], rows["ex", 0]["pod"], rows["ex", 0]["placement"]) == (False, "serving/llama-0", None)
    assert (rows["mp", 1]["free"], rows["mp", 1]["placement"]) == (False, layout["placement"].pk)
    assert (rows["mp", 0]["free"], rows["mp", 0]["pod"], rows["mp", 0]["placement"]) == (True, "", None)
    # Non-MIG partitions carry no MIG geometry.
    assert (rows["mp", 0]["mig_profile"], rows["mp", 0]["mig_start"], rows["mp", 0]["mig_size"]) == ("", None, None)


def test_it_retrieves_a_partition_by_id(viewer_api, layout):
    held = layout["held"]

    body = viewer_api.get(f"/api/v1/partitions/{held.id}/").json()

    assert (body["id"], body["node"], body["gpu"], body["kind"]) == (held.id, "mp", "GPU-mp-0", "mps")


@pytest.mark.parametrize(
    "path", ["/api/v1/partitions/0/", "/api/v1/partitions/abc/", "/api/v1/partitions/" + "9" * 30 + "/"]
)
def test_it_answers_404_for_a_missing_or_malformed_id(viewer_api, layout, path):
    assert viewer_api.get(path).status_code == 404


@pytest.mark.parametrize(
    "query, expected",
    [
        ("node=mg", [("GPU-mg-0", 0), ("GPU-mg-0", 1)]),
        ("node=ex&node=mp", [("GPU-ex-0", 0), ("GPU-mp-0", 0), ("GPU-mp-0", 1)]),
        ("gpu=GPU-mp-0", [("GPU-mp-0", 0), ("GPU-mp-0", 1)]),
        ("gpu=GPU-none", []),
        ("kind=mig", [("GPU-mg-0", 0), ("GPU-mg-0", 1)]),
        ("kind=exclusive&kind=mps", [("GPU-ex-0", 0), ("GPU-mp-0", 0), ("GPU-mp-0", 1)]),
        ("mig_profile=2g.20gb", [("GPU-mg-0", 1)]),
        ("free=true", [("GPU-mg-0", 0), ("GPU-mg-0", 1), ("GPU-mp-0", 0)]),
        ("free=false", [("GPU-ex-0", 0), ("GPU-mp-0", 1)]),
        ("free=true&kind=mps", [("GPU-mp-0", 0)]),
    ],
)
def test_it_filters_partitions(viewer_api, layout, query, expected):
    assert slots(viewer_api.get(f"/api/v1/partitions/?{query}")) == expected


def test_it_orders_partitions(viewer_api, layout):
    ordered = slots(viewer_api.get("/api/v1/partitions/?ordering=share_milli"))

    # 286 < 429 < 500 = 500 (ties broken by id) < 1000
    assert ordered == [("GPU-mg-0", 1), ("GPU-mg-0", 0), ("GPU-mp-0", 0), ("GPU-mp-0", 1), ("GPU-ex-0", 0)]


@pytest.mark.parametrize(
    "query, field",
    [
        ("kind=bogus", "kind"),
        ("kind=MIG", "kind"),
        ("free=maybe", "free"),
        ("gpu=%00", "gpu"),
        ("mig_profile=%00", "mig_profile"),
        ("ordering=pod", "ordering"),
        ("offset=-5", "offset"),
    ],
)
def test_it_answers_400_with_the_field_for_bad_values(viewer_api, layout, query, field):
    response = viewer_api.get(f"/api/v1/partitions/?{query}")

    assert response.status_code == 400, response.content
    assert response.json()[field]


def test_it_lists_partitions_in_a_constant_number_of_queries(viewer_api, db, django_assert_max_num_queries):
    for i in range(6):
        make_node(f"n{i}", gpu_count=4)

    # role lookup + count + one page query joined to GPU and node.
    with django_assert_max_num_queries(3):
        response = viewer_api.get("/api/v1/partitions/")

    assert response.status_code == 200, response.content[:300]
    body = response.json()
    assert body["count"] == 24
    assert body["results"][0]["node"] == "n0"


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_it_is_read_only(method, operator, api, layout):
    api.force_authenticate(operator)

    response = getattr(api, method)(f"/api/v1/partitions/{layout['held'].id}/", {"pod": "x/y"}, format="json")

    assert response.status_code == 405
    assert Partition.objects.get(id=layout["held"].id).pod == ""
