"""The describe-like texts: a rollout preview, a plan, the savings (gpuplane_cli.rollout_text and
the plans and savings commands), from answers shaped as the API's."""
from __future__ import annotations

import re
from datetime import UTC, datetime

from gpuplane_cli.commands.plans import plan_text
from gpuplane_cli.commands.savings import render as savings_text
from gpuplane_cli.rollout_text import render_preview

PREVIEW = {
    "config": {"mode": "mps", "replicas": 4, "mig_layout": None}, "strategy": "rolling", "max_unavailable": 1,
    "maintenance_window": None, "move_back": False, "placer": "the placement engine", "feasible": False,
    "blockers": ["team-a/chat replica 0 has nowhere to go"],
    "batches": [{"index": 1, "nodes": ["n1"], "capacity_dip_milli": 7000, "total_capacity_milli": 64000,
                 "capacity_dip_percent": 10.9,
                 "moves": [{"workload": "team-a/chat replica 0", "size_milli": 250, "source": "n1", "destination": "",
                            "outcome": "unschedulable", "gpus": [], "partition": "", "reason": "0/3 nodes are available"}]},
                {"index": 2, "nodes": ["n2"], "capacity_dip_milli": 3500, "total_capacity_milli": 64000,
                 "capacity_dip_percent": 5.5, "moves": []}],
    "skipped": [{"node": "n3", "reason": "already at mps x4"}], "refusals": [],
    "drain_blockers": [{"node": "n2", "reason": "a bare pod", "pods": [{"pod": "ns/p", "kind": "bare"}]}],
    "pods_unread": "", "explanation": ["batch 1: n1 (7 GPU out of service, 10.9 % of capacity)"],
    "configs": {"present": ["mps-4"], "to_write": ["mps-4-mig"], "problems": []},
}


def test_a_preview_says_the_verdict_blockers_batches_moves_and_what_is_skipped():
    text = render_preview(PREVIEW)
    assert text.startswith("Verdict:          NOT safe now\nConfig:           mps x4 on 2 node(s) in 2 batch(es), rolling,")
    assert re.search(r"^Configs to write: mps-4-mig$", text, re.M)
    assert "\nBlockers:\n  * team-a/chat replica 0 has nowhere to go\n" in text
    assert re.search(r"^1\s+n1\s+10.9%\s+1$", text, re.M) and re.search(r"^2\s+n2\s+5.5%\s+0$", text, re.M)
    assert re.search(r"^1\s+team-a/chat replica 0\s+n1\s+<none>\s+<none>\s+<none>\s+unschedulable\s+0/3 nodes", text, re.M)
    assert "\nSkipped:\n  n3: already at mps x4\n" in text and "\nDrain blockers:\n  n2: a bare pod\n" in text


def test_a_plan_lists_its_moves():
    plan = {"id": 3, "status": "proposed", "method": "greedy", "nodes_freed": ["n2"], "gpus_freed": 8,
            "savings_per_hour": {"usd": 24.0, "kwh": 3.2}, "disruption": {"workloads_moved": 2},
            "moves": [{"workload": "a/chat replica 0", "from_node": "n2", "from_gpus": [1], "to_node": "n1",
                       "to_gpus": [0], "mig_profile": "", "why": "empties n2"}],
            "created_at": "2026-11-27T07:00:00Z", "created_by": None, "expires_at": "2026-11-27T07:30:00Z",
            "decided_by": None, "reason": ""}
    text = plan_text(plan)
    assert re.search(r"^Frees:\s+n2; 8 GPU\(s\)$", text, re.M) and re.search(r"^Saves per hour:\s+\$24.00, 3.20 kWh$", text, re.M)
    assert re.search(r"^Created:\s+2026-11-27T07:00:00Z by system$", text, re.M)
    assert re.search(r"^a/chat replica 0\s+n2 \[1\]\s+n1 \[0\]\s+<none>\s+empties n2$", text, re.M)


def test_the_savings_say_what_they_leave_out():
    figures = {"baseline": "whole GPUs", "baseline_gpus": 32, "gpus_used": 26, "gpus_saved": 6, "saved_percent": 18.75,
               "allocated_gpu_equivalents": 16.75, "usd_per_hour": 25.0, "kwh_per_hour": 3.0,
               "gpu_hours_saved_24h": 0.0, "usd_saved_24h": 0.0, "kwh_saved_24h": 0.0, "sampled_at": None,
               "sample_interval_s": 300, "by_model": [],
               "not_running": {"replicas": 2, "baseline_gpus": 2,
                               "deployments": [{"deployment": 4, "workload": "a/chat", "missing": 2, "gpus": 2}]}}
    text = savings_text(figures, datetime(2026, 11, 27, tzinfo=UTC))
    assert re.search(r"^GPUs:\s+26 used of 32 on the baseline: 6 saved \(18.8 %\)$", text, re.M)
    assert re.search(r"^Left out:\s+2 replica\(s\) not running, 2 GPU\(s\) of baseline: a/chat \(2\)$", text, re.M)
    assert re.search(r"^Sampled:\s+not yet$", text, re.M)
    assert "Left out" not in savings_text({**figures, "not_running": {"replicas": 0}}, datetime(2026, 11, 27, tzinfo=UTC))
