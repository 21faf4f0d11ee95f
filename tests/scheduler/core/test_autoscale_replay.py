"""bench/autoscale_replay.py on a small trace slice: the JSON contract, determinism, the SLO kept."""
from __future__ import annotations

import csv
import json
import random
from datetime import datetime, timedelta

import pytest

from bench import autoscale_replay
from scheduler.core.serving import figures_for, predict_capacity

CONTRACT = ("policy", "requests", "slo_attainment_pct", "gpu_hours", "replica_changes", "reversals_per_10min",
            "ttft_p99_s")


@pytest.fixture
def trace(tmp_path):
    """Six minutes in the Azure trace's format: 3 req/s, then 8 req/s for two minutes, then 3."""
    rng = random.Random(7)
    path = tmp_path / "trace.csv"
    start = datetime(2023, 11, 16, 18, 15, 46)
    at = 0.0
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        while at < 360:
            rate = 8.0 if 120 <= at < 240 else 3.0
            at += rng.expovariate(rate)
            stamp = (start + timedelta(seconds=at)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
            writer.writerow([stamp, rng.randint(200, 2000), rng.randint(20, 300)])
    return path


def run(trace, policy, *extra):
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert autoscale_replay.main(["--trace", str(trace), "--policy", policy, "--json", *extra]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("policy", ["static-peak", "hpa", "seed", "gpuplane"])
def test_every_policy_prints_the_contract(trace, policy):
    result = run(trace, policy)
    assert set(CONTRACT) <= set(result)
    assert result["policy"] == policy and result["requests"] > 1500
    assert 0 <= result["slo_attainment_pct"] <= 100 and result["gpu_hours"] > 0
    assert result["slo"] == {"ttft_s": 2.0, "tpot_s": 0.2}  # stated in the docstring, never tuned


def test_gpuplane_follows_the_step_and_is_deterministic(trace):
    first = run(trace, "gpuplane", "--decisions")
    assert first == run(trace, "gpuplane", "--decisions")
    actions = [d["action"] for d in first["decisions"]]
    assert "up" in actions  # the step to 8 req/s was met
    assert first["replicas_max"] > first["replicas_min"]
    assert all(d["t"] >= 120 for d in first["decisions"] if d["action"] == "up")  # not before the step


def test_the_replay_reads_only_the_contract_columns(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,Tokens\n2023-11-16 18:15:46.6805900,3\n")
    with pytest.raises(SystemExit, match="ContextTokens"):
        autoscale_replay.load_trace(path)


def test_the_docstring_states_the_serving_model_it_runs():
    figures = figures_for("L4")
    doc = autoscale_replay.__doc__
    assert f"{figures.prefill_tokens_per_s:,.0f} prompt tokens/s" in doc
    assert f"{figures.weight_read_s * 1000:.1f} ms weight read" in doc
    capacity = predict_capacity(figures, 1155, 211, autoscale_replay.TPOT_SLO_S).capacity_rps
    assert f"{capacity:.2f} requests/s per replica" in doc
    assert "**2.0 s**" in doc and "**0.2 s**" in doc
