"""Tables, ages, the progress bar and each kind's columns (gpuplane_cli.output, gpuplane_cli.resources)."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from gpuplane_cli.errors import CLIError
from gpuplane_cli.output import age, as_list, dump, human_duration, progress_bar, table
from gpuplane_cli.resources import DEPLOYMENTS, GPUS, NODES, PLANS, ROLLOUTS, config_text, kind_named

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_table_pads_columns_three_spaces_apart_and_shows_none_for_no_value():
    assert table(("name", "util"), [("a100-node-1", "12.5%"), ("h", None), ("x", "")]) == (
        "NAME          UTIL\n"
        "a100-node-1   12.5%\n"
        "h             <none>\n"
        "x             <none>"
    )


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (119, "119s"), (120, "2m"), (200, "3m20s"), (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"),
    (5 * 3600 + 12 * 60, "5h12m"), (20 * 3600, "20h"), (50 * 3600, "2d2h"), (72 * 3600, "3d"), (45 * 86400, "45d"),
    (800 * 86400, "2y70d"), (9 * 365 * 86400, "9y"),
])
def test_ages_read_like_kubectl(seconds, text):
    assert human_duration(seconds) == text


def test_an_age_from_an_api_timestamp():
    assert age((NOW - timedelta(minutes=25)).isoformat().replace("+00:00", "Z"), NOW) == "25m"
    assert age(None, NOW) == "<none>" and age("yesterday", NOW) == "<unknown>"
    assert age((NOW + timedelta(minutes=5)).isoformat(), NOW) == "<invalid>"  # a clock far ahead


@pytest.mark.parametrize(("percent", "text"), [
    (0, "[..........]   0.0 %"), (50, "[#####.....]  50.0 %"), (54.9, "[#####.....]  54.9 %"),
    (100, "[##########] 100.0 %"), (130, "[##########] 100.0 %"), (-5, "[..........]   0.0 %"),
])
def test_the_progress_bar_fills_in_proportion(percent, text):
    assert progress_bar(percent, width=10) == text


def test_json_and_yaml_keep_the_api_objects_and_lists_are_kubectl_lists():
    items = [{"name": "b", "id": 2}, {"name": "a", "id": 1}]
    assert json.loads(dump(as_list(items), "json")) == {"kind": "List", "items": items}
    assert yaml.safe_load(dump(items[0], "yaml")) == items[0]
    assert dump(items[0], "yaml").startswith("name: b\nid: 2")  # the API's key order, not sorted


def test_config_text():
    assert config_text({"mode": "mps", "replicas": 4, "mig_layout": None}) == "mps x4"
    assert config_text({"mode": "mig", "mig_layout": {"3g.40gb": 2, "1g.10gb": 1}}) == "mig 3g.40gb:2,1g.10gb:1"
    assert config_text({"mode": "exclusive"}) == "exclusive" and config_text(None) == "<none>"


def test_a_deployment_row_counts_running_replicas_and_names_nodes_and_sharing():
    deployment = {"namespace": "team-a", "name": "chat", "id": 7, "status": "running", "replicas": 2, "model": "m",
                  "memory_gb": 8.0, "gpu_count": 1, "sharing": "auto", "created_at": "2026-11-27T11:00:00Z",
                  "placements": [
                      {"status": "running", "node": "gpu-b", "sharing": "mps", "share_percent": 25.0, "mig_profile": ""},
                      {"status": "binding", "node": "gpu-a", "sharing": "mps", "share_percent": 25.0, "mig_profile": ""},
                      {"status": "released", "node": "gpu-z", "sharing": "mps", "share_percent": 25.0},
                  ]}
    assert DEPLOYMENTS.row(deployment, NOW) == ("team-a", "chat", 7, "running", "1/2", "m", "8.0 GB", 1, "mps 25%",
                                                "gpu-a,gpu-b", "60m")


def test_a_cordoned_node_reads_like_kubectl_and_a_gpu_shows_its_live_figures():
    node = {"name": "n1", "ready": True, "cordoned": True, "gpu_model": "H100-SXM5-80GB", "gpu_count": 8,
            "gpus_allocated": 3, "applied_config": {"mode": "timeslice", "replicas": 4}, "utilization_pct": 41.25}
    assert NODES.row(node, NOW) == ("n1", "Ready,SchedulingDisabled", "H100-SXM5-80GB", 8, "3/8", "timeslice x4", "41.2%")
    gpu = {"node": "n1", "index": 3, "model": "H100-SXM5-80GB", "utilization_pct": 87.5, "memory_used_mib": 40960,
           "memory_mib": 81559, "power_w": 612.4, "temperature_c": 71.0, "allocated_milli": 500,
           "sampled_at": "2026-11-27T11:59:30Z"}
    assert GPUS.row(gpu, NOW) == ("n1", 3, "H100-SXM5-80GB", "87.5%", "40.0/79.6 GB", "612 W", "71 C", "50%", "30s")
    quiet = {**gpu, "utilization_pct": None, "memory_used_mib": None, "power_w": None, "sampled_at": None}
    assert GPUS.row(quiet, NOW)[3:6] == ("<none>", "<none>/79.6 GB", "<none>")


def test_rollout_and_plan_rows():
    rollout = {"id": 3, "name": "r", "status": "running", "progress_percent": 50.0, "nodes": [{}, {}],
               "config": {"mode": "mps", "replicas": 4}, "strategy": "rolling", "created_at": "2026-11-27T11:58:00Z"}
    assert ROLLOUTS.row(rollout, NOW) == (3, "r", "running", "50.0%", 2, "mps x4", "rolling", "2m")
    plan = {"id": 5, "status": "proposed", "moves": [{}, {}, {}], "nodes_freed": ["a", "b"], "gpus_freed": 12,
            "savings_per_hour": {"usd": 9.0}, "created_by": None, "created_at": "2026-11-27T11:00:00Z"}
    assert PLANS.row(plan, NOW) == (5, "proposed", 3, "a,b", 12, "9.00", None, "60m")


def test_kinds_are_found_by_any_alias_and_an_unknown_one_is_kubectls_error():
    assert kind_named("deploy") is DEPLOYMENTS and kind_named("NO") is NODES and kind_named("consolidations") is PLANS
    with pytest.raises(CLIError) as refused:
        kind_named("pods")
    assert refused.value.message.startswith('error: the server doesn\'t have a resource type "pods"')
