"""A node's sharing config (issue 9's contract): validation, and rendering into NVIDIA's formats.

The expected documents follow NVIDIA's documented examples, field by field:

- k8s-device-plugin, README "Shared Access to GPUs with CUDA Time-Slicing" / "with CUDA MPS" and
  docs/customizing.md (NVIDIA/k8s-device-plugin): ``version: v1``, ``flags.migStrategy``,
  ``sharing.timeSlicing`` | ``sharing.mps`` with ``resources: [{name: nvidia.com/gpu, replicas: N}]``,
  a config picked per node by the label ``nvidia.com/device-plugin.config=<name>``;
- mig-parted, README and examples/config.yaml (NVIDIA/mig-parted): ``version: v1``,
  ``mig-configs: {<name>: [{devices: all, mig-enabled: true, mig-devices: {"1g.10gb": 7}}]}``, and
  ``all-disabled: [{devices: all, mig-enabled: false}]``, picked by ``nvidia.com/mig.config=<name>``.
"""
import pytest
import yaml

from nodes.catalog import CATALOG
from nodes.contract import LABEL_DEVICE_PLUGIN_CONFIG, LABEL_MIG_CONFIG, LABEL_SHARING_MODE
from nodes.sharing.configmap import to_yaml
from nodes.sharing.device_plugin import device_plugin_configmap, validate_device_plugin_config
from nodes.sharing.mig_parted import mig_parted_configmap
from nodes.sharing.node_config import (
    InvalidNodeConfig,
    NodeConfig,
    applied_node_config,
    mig_config_name,
    node_labels,
    parse_node_config,
    render_configmaps,
    render_device_plugin_config,
    render_mig_parted_entries,
)
from nodes.sharing.schema import InvalidSharingConfig

H100 = "H100-SXM5-80GB"
A100_40 = "A100-SXM4-40GB"


# --- the value and its validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        {"mode": "exclusive", "replicas": None, "mig_layout": None},
        {"mode": "mps", "replicas": 4, "mig_layout": None},
        {"mode": "mps-weighted", "replicas": 8, "mig_layout": None},
        {"mode": "timeslice", "replicas": 2, "mig_layout": None},
        {"mode": "mig", "replicas": None, "mig_layout": {"3g.40gb": 1, "2g.20gb": 2}},
    ],
)
def test_a_valid_config_round_trips_through_the_api_shape(data):
    config = parse_node_config(data, model=H100)
    assert config.as_dict() == data


def test_missing_optional_keys_mean_null():
    assert parse_node_config({"mode": "exclusive"}).as_dict() == {"mode": "exclusive", "replicas": None, "mig_layout": None}


def test_configs_compare_by_value_whatever_the_layout_order():
    a = parse_node_config({"mode": "mig", "mig_layout": {"2g.20gb": 2, "3g.40gb": 1}})
    b = parse_node_config({"mode": "mig", "mig_layout": {"3g.40gb": 1, "2g.20gb": 2}})
    assert a == b and hash(a) == hash(b)
    assert a.describe() == "MIG 1x3g.40gb + 2x2g.20gb"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ("mps", "non_field_errors", "is an object"),
        ({"mode": "mps", "replicas": 4, "extra": 1}, "extra", "unknown key 'extra'"),
        ({"mode": "shared"}, "mode", "mode must be one of exclusive, mig, mps, mps-weighted, timeslice"),
        ({"mode": "exclusive", "replicas": 2}, "replicas", "replicas must be null for mode exclusive"),
        ({"mode": "mig", "replicas": 2, "mig_layout": {"7g.80gb": 1}}, "replicas", "must be null for mode mig"),
        ({"mode": "mps"}, "replicas", "mode mps needs replicas, an integer >= 2"),
        ({"mode": "timeslice", "replicas": 1}, "replicas", "integer >= 2"),
        ({"mode": "timeslice", "replicas": True}, "replicas", "integer >= 2"),
        ({"mode": "mps-weighted", "replicas": "4"}, "replicas", "integer >= 2"),
        ({"mode": "mps", "replicas": 49}, "replicas", "MPS serves at most 48 clients per GPU"),
        ({"mode": "timeslice", "replicas": 4, "mig_layout": {"1g.10gb": 1}}, "mig_layout", "must be null for mode timeslice"),
        ({"mode": "mig"}, "mig_layout", "mode mig needs mig_layout"),
        ({"mode": "mig", "mig_layout": {}}, "mig_layout", "non-empty object"),
        ({"mode": "mig", "mig_layout": {"3g": 1}}, "mig_layout", "is not a MIG profile name"),
        ({"mode": "mig", "mig_layout": {"3g.40gb": 0}}, "mig_layout", "must be an integer >= 1"),
    ],
)
def test_invalid_configs_are_refused_naming_the_field(data, field, message):
    with pytest.raises(InvalidNodeConfig, match=message) as caught:
        parse_node_config(data)
    assert caught.value.field == field
    assert caught.value.field_errors() == {field: [str(caught.value)]}
    assert isinstance(caught.value, InvalidSharingConfig)


def test_the_seed_mig_layout_is_refused_with_the_planner_reason():
    # docs/design.md section 4: two 3g.40gb take all 8 memory slices, so no 1g.10gb fits beside them.
    with pytest.raises(InvalidNodeConfig, match="memory slice") as caught:
        parse_node_config({"mode": "mig", "mig_layout": {"3g.40gb": 2, "1g.10gb": 1}}, model=H100)
    assert caught.value.field == "mig_layout"


def test_a_layout_of_another_gpu_model_is_refused_for_this_node():
    # 3g.40gb is an 80 GB board's profile: an A100-40GB node has 3g.20gb instead.
    with pytest.raises(InvalidNodeConfig) as caught:
        parse_node_config({"mode": "mig", "mig_layout": {"3g.40gb": 1}}, model=A100_40)
    assert caught.value.field == "mig_layout"
    assert "3g.40gb" in str(caught.value)


def test_mig_is_refused_on_a_model_without_mig():
    no_mig = next(model for model in CATALOG.values() if not model.mig_capable)
    with pytest.raises(InvalidNodeConfig, match="has no MIG"):
        parse_node_config({"mode": "mig", "mig_layout": {"1g.10gb": 1}}, model=no_mig)


def test_the_mps_client_limit_follows_the_node_model():
    old = next((m for m in CATALOG.values() if m.compute_capability < (7, 5)), None)
    if old is None:
        pytest.skip("no pre-Turing model in the catalog")
    with pytest.raises(InvalidNodeConfig, match="at most 16 clients"):
        parse_node_config({"mode": "mps-weighted", "replicas": 17}, model=old)
    assert parse_node_config({"mode": "mps", "replicas": 48}, model=H100).replicas == 48


# --- rendering into NVIDIA's formats -------------------------------------------------------------


def test_mps_renders_the_documented_device_plugin_mps_config():
    """k8s-device-plugin README, "with CUDA MPS": sharing.mps.resources [{name: nvidia.com/gpu, replicas: 10}]."""
    name, config = render_device_plugin_config(parse_node_config({"mode": "mps", "replicas": 4}))
    assert name == "gpuplane-mps-4"
    assert config["version"] == "v1"
    assert config["flags"] == {"migStrategy": "none"}
    assert list(config["sharing"]) == ["mps"]
    assert config["sharing"]["mps"]["renameByDefault"] is False
    assert config["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert validate_device_plugin_config(config).strategy == "mps"


@pytest.mark.parametrize(("mode", "name"), [("timeslice", "gpuplane-timeslice-3"), ("mps-weighted", "gpuplane-weighted-3")])
def test_time_slicing_modes_render_the_documented_time_slicing_yaml(mode, name):
    """k8s-device-plugin README, "with CUDA Time-Slicing", the documented example (replicas: 10 there)."""
    rendered_name, config = render_device_plugin_config(parse_node_config({"mode": mode, "replicas": 3}))
    assert rendered_name == name
    assert to_yaml(config) == (
        "version: v1\n"
        "flags:\n"
        "  migStrategy: none\n"
        "sharing:\n"
        "  timeSlicing:\n"
        "    renameByDefault: false\n"
        "    failRequestsGreaterThanOne: true\n"
        "    resources:\n"
        "    - name: nvidia.com/gpu\n"
        "      replicas: 3\n"
    )


def test_exclusive_and_mig_render_flags_only():
    """docs/customizing.md: a config without ``sharing`` gives whole GPUs; MIG nodes use migStrategy mixed."""
    assert render_device_plugin_config(parse_node_config({"mode": "exclusive"})) == (
        "gpuplane-exclusive", {"version": "v1", "flags": {"migStrategy": "none"}}
    )
    mig = parse_node_config({"mode": "mig", "mig_layout": {"7g.80gb": 1}}, model=H100)
    assert render_device_plugin_config(mig) == ("gpuplane-mig-mixed", {"version": "v1", "flags": {"migStrategy": "mixed"}})


def test_the_named_configs_fit_the_device_plugin_configmap():
    configs = dict(
        render_device_plugin_config(parse_node_config(data))
        for data in ({"mode": "exclusive"}, {"mode": "mps", "replicas": 2}, {"mode": "timeslice", "replicas": 4})
    )
    configmap = device_plugin_configmap(configs)
    assert sorted(configmap["data"]) == ["gpuplane-exclusive", "gpuplane-mps-2", "gpuplane-timeslice-4"]
    assert yaml.safe_load(configmap["data"]["gpuplane-mps-2"])["sharing"]["mps"]["resources"][0]["replicas"] == 2


def test_a_mig_layout_renders_the_documented_mig_parted_entry():
    """mig-parted examples/config.yaml: ``- devices: all / mig-enabled: true / mig-devices: {"1g.10gb": 2, ...}``."""
    config = parse_node_config({"mode": "mig", "mig_layout": {"2g.20gb": 2, "3g.40gb": 1}}, model=H100)
    name, entries = render_mig_parted_entries(config)
    assert name == "gpuplane-mig-1x3g.40gb-2x2g.20gb"
    assert entries == [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}}]
    text = mig_parted_configmap({name: entries}, model=H100)["data"]["config.yaml"]
    assert text == (
        "version: v1\n"
        "mig-configs:\n"
        "  gpuplane-mig-1x3g.40gb-2x2g.20gb:\n"
        "  - devices: all\n"
        "    mig-enabled: true\n"
        "    mig-devices:\n"
        "      3g.40gb: 1\n"
        "      2g.20gb: 2\n"
    )


def test_other_modes_select_mig_parteds_all_disabled():
    """mig-parted examples/config.yaml: ``all-disabled: [{devices: all, mig-enabled: false}]``."""
    assert render_mig_parted_entries(parse_node_config({"mode": "mps", "replicas": 2})) == (
        "all-disabled", [{"devices": "all", "mig-enabled": False}]
    )


def test_the_configmaps_hold_each_selected_config_once():
    """GPU operator docs (gpu-sharing, mig-manager): one ConfigMap of named device plugin configs in
    the operator's namespace, and one ConfigMap whose ``config.yaml`` is the mig-parted file."""
    configs = [
        parse_node_config({"mode": "mps", "replicas": 4}),
        parse_node_config({"mode": "mps", "replicas": 4}),
        parse_node_config({"mode": "mig", "mig_layout": {"1g.10gb": 7}}, model=H100),
    ]
    plugin, mig = render_configmaps(configs, model=H100)
    assert (plugin["metadata"]["namespace"], mig["metadata"]["namespace"]) == ("gpu-operator", "gpu-operator")
    assert list(plugin["data"]) == ["gpuplane-mig-mixed", "gpuplane-mps-4"]
    assert yaml.safe_load(plugin["data"]["gpuplane-mig-mixed"]) == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    parted = yaml.safe_load(mig["data"]["config.yaml"])
    assert parted == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "gpuplane-mig-7x1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        },
    }


def test_a_long_mig_config_name_stays_a_valid_label_value():
    config = NodeConfig.of("mig", None, {f"{n}g.{n}00000000000gb": 1 for n in range(1, 5)})
    name = mig_config_name(config)
    assert len(name) <= 63 and name.startswith("gpuplane-mig-")
    assert name == mig_config_name(config)  # stable: one layout, one name
    assert name != mig_config_name(NodeConfig.of("mig", None, {f"{n}g.{n}00000000000gb": 2 for n in range(1, 5)}))


def test_the_labels_that_apply_a_config():
    weighted = parse_node_config({"mode": "mps-weighted", "replicas": 4})
    assert node_labels(weighted, mig_capable=True) == {
        LABEL_DEVICE_PLUGIN_CONFIG: "gpuplane-weighted-4",
        LABEL_MIG_CONFIG: "all-disabled",
        LABEL_SHARING_MODE: "mps-weighted",
    }
    # Off MIG-capable GPUs no MIG manager runs, so no MIG label; the weighted marker is removed.
    assert node_labels(parse_node_config({"mode": "timeslice", "replicas": 2}), mig_capable=False) == {
        LABEL_DEVICE_PLUGIN_CONFIG: "gpuplane-timeslice-2",
        LABEL_SHARING_MODE: None,
    }


# --- applied config, from what the cluster proves ------------------------------------------------


def test_the_applied_config_comes_from_mode_replicas_and_mig_instances():
    assert applied_node_config("mps", 4).as_dict() == {"mode": "mps", "replicas": 4, "mig_layout": None}
    assert applied_node_config("exclusive", 1).as_dict() == {"mode": "exclusive", "replicas": None, "mig_layout": None}
    same = [{"3g.40gb": 1, "2g.20gb": 2}, {"2g.20gb": 2, "3g.40gb": 1}]
    assert applied_node_config("mig", 1, same).as_dict()["mig_layout"] == {"3g.40gb": 1, "2g.20gb": 2}
    # GPUs with different layouts: one value cannot say it.
    assert applied_node_config("mig", 1, [{"7g.80gb": 1}, {"1g.10gb": 7}]).mig_layout is None
