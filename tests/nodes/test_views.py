"""The server-rendered inventory pages: access rules, the node list with its filters, node detail
with partitions and the MIG slot diagram, and the cluster overview."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from nodes.models import GPU, Node, Partition
from nodes.views import MIGCell, mig_diagram, sharing_label
from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.models import Deployment, Placement
from tests.nodes.factories import hold_partition

pytestmark = pytest.mark.django_db

H100 = "H100-SXM5-80GB"
H100_MIB = 81559


def make_gpu(node: Node, index: int, *, model: str = H100, memory_mib: int = H100_MIB, **fields) -> GPU:
    return GPU.objects.create(
        node=node, index=index, uuid=f"GPU-{node.name}-{index}", model=model, memory_mib=memory_mib, **fields
    )


def make_partition(gpu: GPU, slot: int, kind: str, share_milli: int, memory_mib: int, **fields) -> Partition:
    placement = fields.pop("placement", None)
    partition = Partition.objects.create(
        gpu=gpu, slot=slot, kind=kind, share_milli=share_milli, memory_mib=memory_mib, **fields
    )
    if placement is not None:
        hold_partition(partition, placement)
    return partition


def mig(gpu: GPU, slot: int, profile: str, start: int, size: int, **fields) -> Partition:
    compute = int(profile.split("g.")[0])
    return make_partition(
        gpu, slot, PartitionKind.MIG, compute * 1000 // 7, size * gpu.memory_mib // 8,
        mig_profile=profile, mig_start=start, mig_size=size, **fields,
    )


@pytest.fixture
def cluster() -> dict[str, Node]:
    """Three nodes: an MPS x4 H100 node with telemetry, a MIG node, a cordoned NotReady L4 node.

    gpu-mps-a: 2 GPUs at 30 % and 50 % utilization (mean 40 %), 4 MPS slots each, 1 used by a pod.
    gpu-mig-b: 1 MIG GPU, no telemetry: 3g.40gb [0,4) used by a placement, 2g.20gb [4,6) free,
               slices 6 and 7 in no instance.
    l4-c:      1 exclusive L4, not ready and cordoned, no partitions.
    """
    mps = Node.objects.create(
        name="gpu-mps-a", gpu_model=H100, gpu_count=2, sharing_mode=SharingMode.MPS, sharing_replicas=4
    )
    for index, util in ((0, 30.0), (1, 50.0)):
        # GPU 0's one used slot hands out 250 milli (inventory sync keeps this sum).
        gpu = make_gpu(mps, index, utilization_pct=util, temperature_c=61.0, power_w=412.0,
                       allocated_milli=250 if index == 0 else 0,
                       allocated_memory_mib=H100_MIB // 4 if index == 0 else 0)
        for slot in range(4):
            make_partition(gpu, slot, PartitionKind.MPS, 250, H100_MIB // 4, pod="ml/bert-0" if (index, slot) == (0, 0) else "")
    mig_node = Node.objects.create(
        name="gpu-mig-b", gpu_model=H100, gpu_count=1, sharing_mode=SharingMode.MIG,
        applied_config="all-disabled", desired_config={"mode": "mig", "replicas": None, "mig_layout": {"7g.80gb": 1}},
        labels={"nvidia.com/mig.config": "gpuplane-gpu-mig-b"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    gpu = make_gpu(mig_node, 0, mig_enabled=True, allocated_milli=428)  # the used 3g.40gb: 3 * 1000 // 7
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=30000, namespace="ml")
    placement = Placement.objects.create(deployment=deployment, node=mig_node, replica_index=0)
    mig(gpu, 0, "3g.40gb", 0, 4, placement=placement)
    mig(gpu, 1, "2g.20gb", 4, 2)
    l4 = Node.objects.create(name="l4-c", gpu_model="L4", gpu_count=1, ready=False, cordoned=True)
    make_gpu(l4, 0, model="L4", memory_mib=23034)
    return {"mps": mps, "mig": mig_node, "l4": l4}


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


class _Elements(HTMLParser):
    """Collects the attributes of every start tag whose class list contains `css_class`."""

    def __init__(self, css_class: str) -> None:
        super().__init__()
        self.css_class = css_class
        self.found: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if self.css_class in attributes.get("class", "").split():
            self.found.append(attributes)


def elements(html: str, css_class: str) -> list[dict[str, str]]:
    parser = _Elements(css_class)
    parser.feed(html)
    return parser.found


class _RowText(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self._cells: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self._cells = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._cells is not None:
            self.rows.append(" ".join(" ".join(self._cells).split()))
            self._cells = None

    def handle_data(self, data: str) -> None:
        if self._cells is not None:
            self._cells.append(data)


def table_rows(html: str) -> list[str]:
    """Visible text of each <tr> of the page, whitespace collapsed, for row-level assertions."""
    parser = _RowText()
    parser.feed(html)
    return parser.rows


# --- access ---------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/", "/nodes/", "/nodes/gpu-mig-b/"])
def test_it_redirects_anonymous_users_to_the_sign_in_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={url}"


@pytest.mark.parametrize("url", ["/", "/nodes/", "/nodes/gpu-mig-b/"])
def test_it_refuses_a_signed_in_user_without_a_role(client, outsider, cluster, url):
    client.force_login(outsider)
    response = client.get(url)
    assert response.status_code == 403
    body = response.content.decode()
    assert "You have no role in gpuplane" in body
    assert "gpu-mig-b" not in body.split("</header>")[1]


def test_the_page_header_shows_user_role_and_a_post_logout(viewer_client):
    body = viewer_client.get("/").content.decode()
    assert "vera-viewer" in body
    assert '<span class="badge badge--role" title="Your role">viewer</span>' in body
    assert '<form method="post" action="/accounts/logout/"' in body
    assert 'href="/api/docs/"' in body
    assert 'href="/admin/"' not in body  # Admin link only for staff


def test_staff_users_get_the_admin_link(client, admin_user):
    admin_user.is_staff = True
    admin_user.save()
    client.force_login(admin_user)
    assert 'href="/admin/"' in client.get("/").content.decode()


# --- node list ------------------------------------------------------------------------------


def test_the_list_shows_one_row_per_node_with_its_figures(viewer_client, cluster):
    response = viewer_client.get("/nodes/")
    assert response.status_code == 200
    rows = table_rows(response.content.decode())
    assert rows[0] == "Name GPU model GPUs Sharing mode Utilization Allocated Status"
    # utilization: mean of 30 and 50; allocated in GPUs: 428 milli = 0.43 GPU; one 250-milli MPS slot = 0.25.
    assert rows[1] == f"gpu-mig-b {H100} 1 MIG — 0.43 / 1 GPUs Ready"
    assert rows[2] == f"gpu-mps-a {H100} 2 MPS ×4 40 % 0.25 / 2 GPUs Ready"
    assert rows[3] == "l4-c L4 1 Exclusive — 0 / 1 GPUs NotReady Cordoned"
    assert 'href="/nodes/gpu-mps-a/"' in response.content.decode()


def test_the_allocated_bar_measures_gpu_share_not_partition_count(viewer_client, cluster):
    body = viewer_client.get("/nodes/").content.decode()
    # gpu-mps-a: 250 of 2 x 1000 milli = 12.5 % -> 12 (banker's rounding); gpu-mig-b: 428 of 1000 = 43 %.
    assert 'bar__fill bar__fill--alt" style="width: 12%"' in body
    assert 'bar__fill bar__fill--alt" style="width: 43%"' in body


def test_the_utilization_bar_width_is_the_mean(viewer_client, cluster):
    body = viewer_client.get("/nodes/").content.decode()
    assert 'style="width: 40%"' in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sharing_mode=mig", ["gpu-mig-b"]),
        ("sharing_mode=mps", ["gpu-mps-a"]),
        ("gpu_model=L4", ["l4-c"]),
        ("q=mps", ["gpu-mps-a"]),
        (f"gpu_model={H100}&sharing_mode=mig", ["gpu-mig-b"]),
    ],
)
def test_the_filters_narrow_the_list(viewer_client, cluster, query, expected):
    body = viewer_client.get(f"/nodes/?{query}").content.decode()
    shown = [name for name in ("gpu-mig-b", "gpu-mps-a", "l4-c") if f'href="/nodes/{name}/"' in body]
    assert shown == expected


def test_the_filter_form_has_labelled_controls(viewer_client, cluster):
    body = viewer_client.get("/nodes/").content.decode()
    for name in ("q", "gpu_model", "sharing_mode"):
        assert f'name="{name}"' in body
        assert f'<label for="id_{name}">' in body


def test_it_says_when_no_node_matches(viewer_client, cluster):
    body = viewer_client.get("/nodes/?q=nothing-like-this").content.decode()
    assert "No nodes match these filters." in body
    assert "<table" not in body


def test_an_unreadable_filter_value_shows_an_error_not_every_node(viewer_client, cluster):
    response = viewer_client.get("/nodes/?ready=maybe")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Enter true or false." in body
    assert "<table" not in body


def test_it_says_when_there_are_no_nodes_at_all(viewer_client):
    body = viewer_client.get("/nodes/").content.decode()
    assert "No nodes yet." in body


def test_sharing_labels_carry_replicas_only_where_the_mode_has_them():
    assert sharing_label("mps", 4) == "MPS ×4"
    assert sharing_label("timeslice", 8) == "Time-slicing ×8"
    assert sharing_label("mps-weighted", 3) == "Weighted MPS"  # R bounds pods, it does not cut the GPU
    assert sharing_label("mig", 1) == "MIG"
    assert sharing_label("exclusive", 1) == "Exclusive"


# --- node detail ----------------------------------------------------------------------------


def test_the_detail_lists_gpus_and_their_partitions(viewer_client, cluster):
    response = viewer_client.get("/nodes/gpu-mps-a/")
    assert response.status_code == 200
    body = response.content.decode()
    rows = table_rows(body)
    assert "Index UUID Model Memory Utilization Allocated Temperature Power" in rows
    assert f"0 GPU-gpu-mps-a-0 {H100} 79.6 GB 30 % 25 % · 19.9 GB 61 °C 412 W" in rows
    assert f"1 GPU-gpu-mps-a-1 {H100} 79.6 GB 50 % 0 % · 0 GB 61 °C 412 W" in rows
    assert "0 MPS slot 25 % 19.9 GB ml/bert-0" in rows
    assert rows.count("1 MPS slot 25 % 19.9 GB free") == 2
    assert "MPS ×4" in body
    assert "mig__grid" not in body  # no MIG diagram for non-MIG GPUs


def test_the_detail_shows_sharing_config_labels_and_taints(viewer_client, cluster):
    body = viewer_client.get("/nodes/gpu-mig-b/").content.decode()
    assert "<code>all-disabled</code>" in body
    # Desired: one 7g.80gb per GPU; the GPU runs 3g.40gb + 2g.20gb, so the change is pending.
    assert "MIG 1x7g.80gb (<code>gpuplane-mig-1x7g.80gb</code>)" in body
    assert "change pending" in body
    assert "<details" in body
    assert "<code>nvidia.com/mig.config=gpuplane-gpu-mig-b</code>" in body
    assert "<code>nvidia.com/gpu=present:NoSchedule</code>" in body


def test_the_mig_diagram_places_each_instance_on_its_memory_slices(viewer_client, cluster):
    body = viewer_client.get("/nodes/gpu-mig-b/").content.decode()
    cells = elements(body, "mig__cell")
    by_start = {int(c["data-start"]): c for c in cells}
    assert sorted(by_start) == [0, 4, 6, 7]

    used = by_start[0]
    assert "mig__cell--used" in used["class"]
    assert "grid-column: 1 / span 4" in used["style"]
    assert used["aria-label"] == "3g.40gb at slices 0–3, in use by ml/llama #0"

    free = by_start[4]
    assert "mig__cell--free" in free["class"]
    assert "grid-column: 5 / span 2" in free["style"]
    assert free["aria-label"] == "2g.20gb at slices 4–5, free"

    for start in (6, 7):
        assert "mig__cell--empty" in by_start[start]["class"]
        assert f"grid-column: {start + 1} / span 1" in by_start[start]["style"]
        assert by_start[start]["aria-label"] == f"slice {start} unused"
    assert all("grid-row: 1" in c["style"] for c in cells)
    assert "MIG instance in use" in body  # legend


def test_the_mig_partitions_table_names_profile_and_occupant(viewer_client, cluster):
    rows = table_rows(viewer_client.get("/nodes/gpu-mig-b/").content.decode())
    # Shares are the profiles' exact 3/7 and 2/7, rounded (not the stored 428 / 285 thousandths,
    # which read 42.8 % and 28.5 %); the rest of the GPU takes the difference, so the column adds
    # up to 100 %: 42.9 + 28.6 + 28.5.
    assert "0 MIG instance 3g.40gb 3/7 · 42.9 % 39.8 GB ml/llama #0" in rows
    assert "1 MIG instance 2g.20gb 2/7 · 28.6 % 19.9 GB free" in rows
    assert "— Not in any MIG instance 28.5 %" in rows


def test_it_answers_404_for_an_unknown_node(viewer_client, cluster):
    assert viewer_client.get("/nodes/no-such-node/").status_code == 404


def test_overlapping_mig_instances_are_drawn_in_a_second_lane():
    gpu = GPU(memory_mib=H100_MIB, mig_enabled=True)
    a = Partition(gpu=gpu, slot=0, kind="mig", mig_profile="4g.40gb", mig_start=0, mig_size=4, share_milli=571, memory_mib=1)
    b = Partition(gpu=gpu, slot=1, kind="mig", mig_profile="2g.20gb", mig_start=2, mig_size=2, share_milli=285, memory_mib=1)
    cells = mig_diagram([b, a])
    assert cells == [
        MIGCell(0, 4, 1, "4g.40gb", None),
        MIGCell(4, 1, 1),
        MIGCell(5, 1, 1),
        MIGCell(6, 1, 1),
        MIGCell(7, 1, 1),
        MIGCell(2, 2, 2, "2g.20gb", None),
    ]


def test_seven_1g_instances_leave_memory_slice_7_empty():
    gpu = GPU(memory_mib=H100_MIB, mig_enabled=True)
    parts = [
        Partition(gpu=gpu, slot=s, kind="mig", mig_profile="1g.10gb", mig_start=s, mig_size=1, share_milli=142, memory_mib=1)
        for s in range(7)
    ]
    cells = mig_diagram(parts)
    assert [(c.start, c.is_instance) for c in cells] == [(s, True) for s in range(7)] + [(7, False)]


# --- overview -------------------------------------------------------------------------------


def test_pages_use_a_fixed_number_of_queries(viewer_client, cluster, django_assert_max_num_queries):
    """No query per node, GPU or partition: more inventory must not mean more round trips."""
    for n in range(3):
        extra = Node.objects.create(name=f"extra-{n}", sharing_mode=SharingMode.MIG)
        mig(make_gpu(extra, 0, mig_enabled=True), 0, "7g.80gb", 0, 8, pod=f"ml/big-{n}")
    # Each page must really render (a fast 404 or 500 would pass the count): status and content.
    with django_assert_max_num_queries(8):  # 7 + the page's occupied MIG instances (exact GPU-equivalents)
        response = viewer_client.get("/nodes/")
    assert response.status_code == 200
    assert all(f'href="/nodes/extra-{n}/"' in response.content.decode() for n in range(3))
    for name in ("gpu-mig-b", "gpu-mps-a"):  # a placement occupant; 2 GPUs x 4 partitions
        with django_assert_max_num_queries(9):  # 8 + the node's audit trail
            response = viewer_client.get(f"/nodes/{name}/")
        assert response.status_code == 200
        assert response.context["node"].name == name
    # Session, user and role (3, and the role again in the template) + the cards' 7 (their cache
    # key, the per-node figures' key, GPUs summed per node, nodes, GPUs without partitions,
    # partition groups, GPUs by model) + the node map's 3 (its key, the per-node figures' key, now
    # a cache hit, MIG corrections) + the savings block's 6 (its key, 4 counts, the latest sample)
    # + the replicas that do not run, which the savings leave out (its key, deployments, placements)
    with django_assert_max_num_queries(23):
        response = viewer_client.get("/")
    assert response.status_code == 200
    assert response.context["overview"].nodes_total == 6


def test_the_detail_states_allocation_in_gpu_share(viewer_client, cluster):
    body = viewer_client.get("/nodes/gpu-mps-a/").content.decode()
    # One 250-milli MPS slot of 2 GPUs: 250 / 1000 = 0.25 GPU; partitions: 1 of 2 x 4 slots.
    text = " ".join(re.sub(r"<[^>]+>", " ", body).split())
    # Memory: the slot's 81559 // 4 = 20389 MiB = 19.9 GB of 2 x 79.6 GB.
    assert "Allocated 0.25 of 2 GPU-equivalents · 19.9 GB of 159.3 GB" in text
    assert "MPS slots in use 1 / 8" in text
