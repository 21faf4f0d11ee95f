"""A node's desired and applied sharing configs: derived from inventory, set with validation and audit,
and shown by the API as {mode, replicas, mig_layout} (issue 9's contract)."""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.models import Node
from nodes.node_configs import (
    NODE_DESIRED_CONFIG_CLEARED,
    NODE_DESIRED_CONFIG_SET,
    applied_config,
    config_pending,
    desired_label_value,
    set_desired_config,
)
from nodes.sharing.node_config import InvalidNodeConfig
from nodes.vocabulary import PartitionKind
from tests.nodes.factories import make_node, make_partition

pytestmark = pytest.mark.django_db

H100 = "H100-SXM5-80GB"


def mig(gpu, slot, profile, start, size):
    compute = int(profile.split("g.")[0])
    return make_partition(
        gpu, PartitionKind.MIG, slot, compute * 1000 // 7, size * gpu.memory_mib // 8,
        mig_profile=profile, mig_start=start, mig_size=size,
    )


@pytest.fixture
def mig_node() -> Node:
    """Two H100s, each cut 1x 3g.40gb + 2x 2g.20gb (memory slices 0-3, 4-5, 6-7)."""
    node = make_node("mig-a", H100, 2, "mig", partitions=False, applied_config="gpuplane-mig-1x3g.40gb-2x2g.20gb")
    for gpu in node.gpus.all():
        gpu.mig_enabled = True
        gpu.save()
        mig(gpu, 0, "3g.40gb", 0, 4)
        mig(gpu, 1, "2g.20gb", 4, 2)
        mig(gpu, 2, "2g.20gb", 6, 2)
    return node


def test_the_applied_config_of_a_shared_node_is_its_mode_and_r():
    node = make_node("mps-a", H100, 2, "mps", sharing_replicas=4)
    assert applied_config(node).as_dict() == {"mode": "mps", "replicas": 4, "mig_layout": None}
    assert applied_config(make_node("ex", H100, 1)).as_dict() == {"mode": "exclusive", "replicas": None, "mig_layout": None}


def test_the_applied_mig_layout_is_read_from_each_gpus_instances(mig_node):
    assert applied_config(mig_node).as_dict() == {
        "mode": "mig", "replicas": None, "mig_layout": {"3g.40gb": 1, "2g.20gb": 2},
    }
    # Cut one GPU differently: no single layout describes the node any more.
    gpu = mig_node.gpus.get(index=1)
    gpu.partitions.all().delete()
    mig(gpu, 0, "7g.80gb", 0, 8)
    assert applied_config(mig_node).mig_layout is None


def test_setting_a_desired_config_stores_it_and_records_who_and_what(mig_node, operator):
    set_desired_config(mig_node, {"mode": "mps", "replicas": 4}, actor=operator, reason="rollout 7")

    mig_node.refresh_from_db()
    assert mig_node.desired_config == {"mode": "mps", "replicas": 4, "mig_layout": None}
    assert config_pending(mig_node)
    assert desired_label_value(mig_node) == "gpuplane-mps-4"
    event = AuditEvent.objects.get(verb=NODE_DESIRED_CONFIG_SET)
    assert (event.actor, event.object_id, event.reason) == (operator.username, str(mig_node.pk), "rollout 7")
    assert event.before == {"desired_config": None}
    assert event.after == {"desired_config": {"mode": "mps", "replicas": 4, "mig_layout": None}}


def test_the_running_config_as_desired_is_not_pending_and_a_repeat_records_nothing(mig_node):
    layout = {"mode": "mig", "replicas": None, "mig_layout": {"2g.20gb": 2, "3g.40gb": 1}}
    set_desired_config(mig_node, layout)
    set_desired_config(mig_node, layout)
    assert not config_pending(mig_node)
    assert desired_label_value(mig_node) == mig_node.applied_config
    assert AuditEvent.objects.filter(verb=NODE_DESIRED_CONFIG_SET).count() == 1

    set_desired_config(mig_node, None)
    mig_node.refresh_from_db()
    assert mig_node.desired_config is None and not config_pending(mig_node)
    assert AuditEvent.objects.filter(verb=NODE_DESIRED_CONFIG_CLEARED).count() == 1


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        # docs/design.md section 4: the seed's layout; two 3g.40gb take all 8 memory slices.
        ({"mode": "mig", "mig_layout": {"3g.40gb": 2, "1g.10gb": 1}}, "mig_layout", "memory slice"),
        # An A100-40GB profile on an H100 node.
        ({"mode": "mig", "mig_layout": {"3g.20gb": 2}}, "mig_layout", "3g.20gb"),
        ({"mode": "mps", "replicas": 64}, "replicas", "at most 48 clients"),
    ],
)
def test_an_invalid_config_is_refused_before_anything_is_touched(mig_node, data, field, message):
    set_desired_config(mig_node, {"mode": "exclusive"})
    with pytest.raises(InvalidNodeConfig, match=message) as caught:
        set_desired_config(mig_node, data)
    assert caught.value.field == field
    mig_node.refresh_from_db()
    assert mig_node.desired_config == {"mode": "exclusive", "replicas": None, "mig_layout": None}
    assert AuditEvent.objects.filter(verb=NODE_DESIRED_CONFIG_SET).count() == 1


def test_mig_is_refused_on_a_node_whose_gpus_have_no_mig():
    node = make_node("l4-a", "L4", 1, gpu_memory_mib=23034)
    with pytest.raises(InvalidNodeConfig, match="has no MIG"):
        set_desired_config(node, {"mode": "mig", "mig_layout": {"1g.10gb": 1}})
    node.refresh_from_db()
    assert node.desired_config is None


def test_the_api_shows_both_configs_in_the_contract_shape(viewer_api, mig_node):
    make_node("mps-b", H100, 1, "mps", sharing_replicas=2, applied_config="gpuplane-mps-2")
    set_desired_config(Node.objects.get(name="mps-b"), {"mode": "mps", "replicas": 4})

    rows = {row["name"]: row for row in viewer_api.get("/api/v1/nodes/").json()["results"]}

    assert rows["mig-a"]["applied_config"] == {"mode": "mig", "replicas": None, "mig_layout": {"3g.40gb": 1, "2g.20gb": 2}}
    assert rows["mig-a"]["applied_config_name"] == "gpuplane-mig-1x3g.40gb-2x2g.20gb"
    assert rows["mig-a"]["desired_config"] is None and rows["mig-a"]["desired_config_name"] == ""
    assert rows["mps-b"]["applied_config"] == {"mode": "mps", "replicas": 2, "mig_layout": None}
    assert rows["mps-b"]["desired_config"] == {"mode": "mps", "replicas": 4, "mig_layout": None}
    assert rows["mps-b"]["desired_config_name"] == "gpuplane-mps-4"
    detail = viewer_api.get("/api/v1/nodes/mig-a/").json()
    assert detail["applied_config"] == rows["mig-a"]["applied_config"]
