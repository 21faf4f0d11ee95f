"""The placement benchmark script runs and reports what BENCHMARKS.md needs (tiny sizes here)."""
from __future__ import annotations

import json

import numpy as np

from bench import placement


def test_json_mode_prints_one_object_with_the_required_figures(capsys):
    assert placement.main(["--nodes", "60", "--decisions", "40", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["nodes"] == 60 and result["gpus"] == 480
    for key in ("decisions_per_s", "p50_ms", "p99_ms", "cpu_decisions_per_s", "placed_pct"):
        assert isinstance(result[key], (int, float)), key
    assert result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert sum(result["outcomes"].values()) == 40


def test_table_mode_lists_each_size(capsys):
    assert placement.main(["--nodes", "30", "--nodes", "50", "--decisions", "20"]) == 0
    out = capsys.readouterr().out
    assert "decisions/s" in out
    assert "\n     30 " in out and "\n     50 " in out


def test_the_synthetic_cluster_is_reproducible_and_mixed():
    first, second = placement.build_cluster(200, seed=7), placement.build_cluster(200, seed=7)
    for name, column in first.columns().items():
        np.testing.assert_array_equal(column, second.columns()[name], err_msg=name)  # NaN equals NaN here
    assert len({node.sharing_mode for node in first.nodes}) == 5
    assert 0.3 < 1 - first.free_milli.sum() / (first.gpu_count.sum() * 1000) < 0.8  # pre-filled occupancy


def test_the_decision_digest_is_reproducible_and_tells_profiles_apart():
    from bench import decision_digest

    first = decision_digest.fleet_digest(40, 30, "balanced")
    assert first == decision_digest.fleet_digest(40, 30, "balanced")
    assert first != decision_digest.fleet_digest(40, 30, "packing")
    assert len(first) == 16
