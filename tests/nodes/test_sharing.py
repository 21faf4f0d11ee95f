"""NVIDIA's config formats: device plugin configs, their ConfigMap, mig-parted configs, and their limits."""
import copy
import textwrap

import pytest
import yaml

from nodes.sharing.configmap import to_yaml
from nodes.sharing.device_plugin import (
    SharingSpec,
    check_mps_client_limit,
    device_plugin_config,
    device_plugin_configmap,
    validate_device_plugin_config,
)
from nodes.sharing.mig_parted import (
    mig_parted_config,
    mig_parted_configmap,
    validate_mig_entries,
    validate_mig_parted_config,
)
from nodes.sharing.schema import InvalidSharingConfig


def _yaml(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# --- generated device plugin configs ------------------------------------------------------------


def test_it_generates_the_documented_time_slicing_config():
    expected = _yaml(
        """
        version: v1
        flags:
          migStrategy: none
        sharing:
          timeSlicing:
            renameByDefault: false
            failRequestsGreaterThanOne: true
            resources:
            - name: nvidia.com/gpu
              replicas: 4
        """
    )
    config = device_plugin_config("time-slicing", 4)
    assert to_yaml(config) == expected
    assert yaml.safe_load(expected) == config
    assert validate_device_plugin_config(config) == SharingSpec("time-slicing", 4, "none")


def test_it_generates_an_mps_config_without_the_time_slicing_only_flag():
    expected = _yaml(
        """
        version: v1
        flags:
          migStrategy: none
        sharing:
          mps:
            renameByDefault: false
            resources:
            - name: nvidia.com/gpu
              replicas: 2
        """
    )
    config = device_plugin_config("mps", 2)
    assert to_yaml(config) == expected
    assert validate_device_plugin_config(yaml.safe_load(to_yaml(config))) == SharingSpec("mps", 2, "none")


def test_a_config_without_sharing_only_sets_the_mig_strategy():
    config = device_plugin_config("none", mig_strategy="mixed")
    assert to_yaml(config) == "version: v1\nflags:\n  migStrategy: mixed\n"
    assert validate_device_plugin_config(config) == SharingSpec("none", 1, "mixed")


def test_time_slicing_may_be_combined_with_a_mig_strategy():
    spec = validate_device_plugin_config(device_plugin_config("time-slicing", 3, mig_strategy="mixed"))
    assert spec == SharingSpec("time-slicing", 3, "mixed")


def test_a_missing_mig_strategy_means_the_plugin_default_none():
    assert validate_device_plugin_config({"version": "v1"}) == SharingSpec("none", 1, "none")


def test_the_configmap_holds_each_named_config_as_yaml_text():
    configs = {"ts-4": device_plugin_config("time-slicing", 4), "mps-2": device_plugin_config("mps", 2)}
    configmap = device_plugin_configmap(configs)
    assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["namespace"] == "gpu-operator"
    assert sorted(configmap["data"]) == ["mps-2", "ts-4"]
    assert all(isinstance(text, str) for text in configmap["data"].values())
    assert {name: yaml.safe_load(text) for name, text in configmap["data"].items()} == configs
    # The whole object survives a YAML round trip (kubectl apply -f of the rendered file).
    assert yaml.safe_load(to_yaml(configmap)) == configmap
    # Embedded documents are literal blocks, readable in `kubectl get -o yaml`.
    assert "ts-4: |\n    version: v1\n" in to_yaml(configmap)


def test_the_configmap_refuses_an_invalid_config_and_names_it():
    with pytest.raises(InvalidSharingConfig, match="device plugin config broken: .*replicas"):
        device_plugin_configmap({"broken": {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}})


def test_the_configmap_refuses_a_name_that_is_not_a_configmap_key():
    with pytest.raises(InvalidSharingConfig, match="not a valid ConfigMap key"):
        device_plugin_configmap({"time slicing/4": device_plugin_config("time-slicing", 4)})


# --- device plugin limits -----------------------------------------------------------------------


def _time_slicing(**body_overrides):
    config = device_plugin_config("time-slicing", 4)
    config["sharing"]["timeSlicing"].update(body_overrides)
    return config


@pytest.mark.parametrize(
    "config, message",
    [
        ({"version": "v2"}, "version must be 'v1'"),
        ({"version": "v1", "sharing": {}, "extra": 1}, "unknown key extra in device plugin config"),
        ({"version": "v1", "flags": {"migStrategy": "mixd"}}, "unknown flags.migStrategy 'mixd'"),
        ({"version": "v1", "flags": {"migStrategie": "mixed"}}, "unknown key migStrategie in flags"),
        ({"version": "v1", "sharing": {"timeslicing": {}}}, "unknown key timeslicing in sharing"),
        (_time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": 1}]), "integer >= 2 when sharing is set, not 1"),
        (_time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": 2.5}]), "integer >= 2 when sharing is set, not 2.5"),
        (_time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": "4"}]), "integer >= 2 when sharing is set, not '4'"),
        (_time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": True}]), "integer >= 2 when sharing is set, not True"),
        (_time_slicing(resources=[{"name": "nvidia.com/gpu"}]), "integer >= 2 when sharing is set, not None"),
        (_time_slicing(resources=[]), "must list nvidia.com/gpu"),
        (_time_slicing(resources=[{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]), "unknown resource 'nvidia.com/mig-1g.10gb'"),
        (
            _time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": 2}, {"name": "nvidia.com/gpu", "replicas": 4}]),
            "listed twice.*the same for every GPU",
        ),
        (
            _time_slicing(resources=[{"name": "nvidia.com/gpu", "replicas": 2, "devices": [0]}]),
            "unknown key devices in sharing.timeSlicing.resources entry",
        ),
        (_time_slicing(renameByDefault=True), "renameByDefault must be false"),
        (_time_slicing(failRequestsGreaterThanOne=False), "failRequestsGreaterThanOne must be true"),
        (_time_slicing(oversubscribe=True), "unknown key oversubscribe in sharing.timeSlicing"),
    ],
)
def test_it_rejects_configs_the_device_plugin_or_gpuplane_cannot_use(config, message):
    with pytest.raises(InvalidSharingConfig, match=message):
        validate_device_plugin_config(config)


def test_time_slicing_and_mps_are_mutually_exclusive():
    config = device_plugin_config("time-slicing", 4)
    config["sharing"]["mps"] = copy.deepcopy(device_plugin_config("mps", 2)["sharing"]["mps"])
    with pytest.raises(InvalidSharingConfig, match="timeSlicing and sharing.mps are mutually exclusive"):
        validate_device_plugin_config(config)


@pytest.mark.parametrize("mig_strategy", ["single", "mixed"])
def test_mps_only_shares_full_gpus(mig_strategy):
    with pytest.raises(InvalidSharingConfig, match=f"MPS shares only full GPUs.*migStrategy {mig_strategy}"):
        device_plugin_config("mps", 2, mig_strategy=mig_strategy)


def test_the_mps_client_limit_depends_on_compute_capability():
    check_mps_client_limit(48, (7, 5))  # Turing and newer: 48 clients
    check_mps_client_limit(48, (9, 0))
    check_mps_client_limit(16, (7, 0))  # Volta: 16 clients
    with pytest.raises(InvalidSharingConfig, match="at most 48 clients per GPU on compute capability 9.0; 49"):
        check_mps_client_limit(49, (9, 0))
    with pytest.raises(InvalidSharingConfig, match="at most 16 clients per GPU on compute capability 7.0; 17"):
        check_mps_client_limit(17, (7, 0))


@pytest.mark.parametrize(
    "args, message",
    [
        (("none", 4), "strategy none does not replicate GPUs"),
        (("time-slicing", 1), "integer >= 2"),
        (("mig",), "unknown sharing strategy 'mig'"),
        (("time-slicing", 2, "both"), "unknown flags.migStrategy 'both'"),
    ],
)
def test_the_generator_refuses_impossible_requests(args, message):
    with pytest.raises(InvalidSharingConfig, match=message):
        device_plugin_config(*args)


# --- mig-parted ---------------------------------------------------------------------------------

NODE_A = [
    {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
    {"devices": [2, 3], "mig-enabled": False},
]


def test_it_generates_the_documented_mig_parted_config():
    expected = _yaml(
        """
        version: v1
        mig-configs:
          gpuplane-node-a:
          - devices:
            - 0
            - 1
            mig-enabled: true
            mig-devices:
              3g.40gb: 1
              2g.20gb: 2
          - devices:
            - 2
            - 3
            mig-enabled: false
          all-1g:
          - devices: all
            mig-enabled: true
            mig-devices:
              1g.10gb: 7
        """
    )
    all_1g = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    config = mig_parted_config({"gpuplane-node-a": NODE_A, "all-1g": all_1g}, model="H100-SXM5-80GB")
    assert to_yaml(config) == expected
    assert yaml.safe_load(expected) == config
    validate_mig_parted_config(yaml.safe_load(expected), model="H100-SXM5-80GB")


def test_the_mig_parted_configmap_holds_config_yaml():
    configmap = mig_parted_configmap({"gpuplane-node-a": NODE_A})
    assert list(configmap["data"]) == ["config.yaml"]
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == {"version": "v1", "mig-configs": {"gpuplane-node-a": NODE_A}}


def test_the_seed_layout_is_rejected_because_two_3g_take_every_memory_slice():
    seed = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}]
    with pytest.raises(InvalidSharingConfig, match="mig-parted config seed: entry 0: .*does not fit on A100-SXM4-80GB"):
        mig_parted_config({"seed": seed}, model="A100-SXM4-80GB")


def test_without_a_model_a_layout_must_fit_some_model_with_those_profiles():
    # 1g.5gb exists only on the A100-40GB, where at most 7 fit.
    validate_mig_entries([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}])
    with pytest.raises(InvalidSharingConfig, match="at most 7x 1g.5gb"):
        validate_mig_entries([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 8}}])
    with pytest.raises(InvalidSharingConfig, match="no MIG-capable GPU model has all of the profiles 1g.5gb, 3g.40gb"):
        validate_mig_entries([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 1, "3g.40gb": 1}}])


def test_a_profile_of_another_model_is_rejected_for_a_given_model():
    with pytest.raises(InvalidSharingConfig, match="unknown profile 3g.20gb for H100-SXM5-80GB"):
        validate_mig_entries([{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.20gb": 1}}], model="H100-SXM5-80GB")


def test_shape_only_validation_accepts_a_layout_that_fits_nothing():
    entries = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}]
    validate_mig_entries(entries, check_layouts=False)
    with pytest.raises(InvalidSharingConfig):
        validate_mig_entries(entries)


@pytest.mark.parametrize(
    "entries, message",
    [
        ([], "non-empty list"),
        ([{"devices": [0], "mig-enabled": "yes"}], "mig-enabled must be true or false, not 'yes'"),
        ([{"devices": [], "mig-enabled": False}], "devices must be \"all\" or a non-empty list"),
        ([{"devices": "some", "mig-enabled": False}], "devices must be \"all\""),
        ([{"devices": [0, -1], "mig-enabled": False}], "GPU indexes >= 0, not -1"),
        ([{"devices": [0, True], "mig-enabled": False}], "GPU indexes >= 0, not True"),
        ([{"devices": [0], "mig-enabled": False}, {"devices": [1, 0], "mig-enabled": False}], "GPU 0 is configured by more than one entry"),
        ([{"devices": "all", "mig-enabled": False}, {"devices": [1], "mig-enabled": False}], "GPU 1 is configured by more than one entry"),
        ([{"devices": [1], "mig-enabled": False}, {"devices": "all", "mig-enabled": False}], "devices: all overlaps"),
        ([{"devices": [0], "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}], "mig-devices are set but mig-enabled is false"),
        ([{"devices": [0], "mig-enabled": True, "mig-devices": {"3g": 1}}], "'3g' is not a MIG profile name"),
        ([{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 0}}], "count of 3g.40gb must be an integer >= 1, not 0"),
        ([{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": "1"}}], "count of 3g.40gb must be an integer >= 1, not '1'"),
        ([{"devices": [0], "mig-enabled": True, "mig-devices": ["3g.40gb"]}], "mig-devices must map profile names to counts"),
        ([{"devices": [0], "mig-enabled": True, "migdevices": {}}], "unknown key migdevices in entry 0"),
    ],
)
def test_it_rejects_malformed_mig_parted_entries(entries, message):
    with pytest.raises(InvalidSharingConfig, match=message):
        validate_mig_entries(entries, model="A100-SXM4-80GB")


def test_a_mig_parted_file_needs_version_v1():
    with pytest.raises(InvalidSharingConfig, match="version must be 'v1'"):
        validate_mig_parted_config({"version": "v2", "mig-configs": {}})
    with pytest.raises(InvalidSharingConfig, match="mig-configs must be a mapping"):
        validate_mig_parted_config({"version": "v1", "mig-configs": []})
