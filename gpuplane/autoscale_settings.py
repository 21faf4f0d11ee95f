"""Settings of autoscaling and feedback (docs/design.md section 7; docs/concepts.md "Autoscaling and
feedback" names every one with its unit). ``gpuplane.settings`` imports each by name and puts
``AUTOSCALE_BEAT`` into the beat schedule: one concern, one module.
"""
from __future__ import annotations

from gpuplane.env import env_bool, env_choice, env_int, env_number_map, env_str

# What gpuplane.settings takes (not GPUPLANE_CLUSTER: settings reads that itself).
__all__ = [
    "AUTOSCALE", "AUTOSCALE_INTERVAL_S", "AUTOSCALE_METRICS_SOURCE", "AUTOSCALE_QUERIES", "AUTOSCALE_RECORD_INTERVAL_S",
    "AUTOSCALE_RUNTIME", "AUTOSCALE_SIMULATED_DELIVERY", "AUTOSCALE_SIMULATED_LOAD_FACTOR", "FEEDBACK", "FEEDBACK_ENABLED",
]

GPUPLANE_CLUSTER = env_choice("GPUPLANE_CLUSTER", "simulated", ("simulated", "kubernetes"))

# How often each autoscaled deployment is sampled and its policy evaluated (seconds, below), where the
# samples come from (simulated: the simulated cluster's request stream; prometheus: the queries
# below at GPUPLANE_PROMETHEUS_URL), and the policy's thresholds (AutoscaleSettings field names ->
# numbers, e.g. GPUPLANE_AUTOSCALE='{"max_replicas": 16, "ttft_slo_s": 1.5}'); a deployment's
# autoscale_settings override them.
# Evaluated every 10 s (gpuplane's policy promises a reaction within 15 s of a queue crossing its
# threshold); the monitoring record (a ScalingEvent with the sample) is kept every 30 s, and at
# every change.
AUTOSCALE_INTERVAL_S = env_int("GPUPLANE_AUTOSCALE_INTERVAL_S", 10, minimum=1)
AUTOSCALE_RECORD_INTERVAL_S = env_int("GPUPLANE_AUTOSCALE_RECORD_INTERVAL_S", 30, minimum=1)
AUTOSCALE_METRICS_SOURCE = env_choice(
    "GPUPLANE_AUTOSCALE_METRICS_SOURCE", "simulated" if GPUPLANE_CLUSTER == "simulated" else "prometheus",
    ("simulated", "prometheus", "none"))
AUTOSCALE = env_number_map("GPUPLANE_AUTOSCALE")
# PromQL per serving runtime and series; {selector} becomes the deployment's label matchers
# (gpuplane.io/deployment as Prometheus relabels it). Edit here or override whole runtimes in code.
AUTOSCALE_RUNTIME = env_str("GPUPLANE_AUTOSCALE_RUNTIME", "vllm")
AUTOSCALE_QUERIES: dict[str, dict[str, str]] = {
    "vllm": {
        "queue": "sum(vllm:num_requests_waiting{{{selector}}})",
        "running": "sum(vllm:num_requests_running{{{selector}}})",
        "arrival_rps": "sum(rate(vllm:request_success_total{{{selector}}}[1m])) + "
                       "sum(deriv(vllm:num_requests_waiting{{{selector}}}[1m]))",
        "ttft_p95_s": "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{{selector}}}[1m])))",
        "tpot_p95_s": "histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{{{selector}}}[1m])))",
        "e2e_p95_s": "histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{{{selector}}}[1m])))",
        "tokens_per_s": "sum(rate(vllm:prompt_tokens_total{{{selector}}}[1m])) + "
                        "sum(rate(vllm:generation_tokens_total{{{selector}}}[1m]))",
        "finished_rps": "sum(rate(vllm:request_success_total{{{selector}}}[1m]))",
    },
    "sglang": {
        "queue": "sum(sglang:num_queue_reqs{{{selector}}})",
        "running": "sum(sglang:num_running_reqs{{{selector}}})",
        "arrival_rps": "sum(rate(sglang:num_requests_total{{{selector}}}[1m]))",
        "ttft_p95_s": "histogram_quantile(0.95, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket{{{selector}}}[1m])))",
        "tpot_p95_s": "histogram_quantile(0.95, sum by (le) (rate(sglang:inter_token_latency_seconds_bucket{{{selector}}}[1m])))",
        "e2e_p95_s": "histogram_quantile(0.95, sum by (le) (rate(sglang:e2e_request_latency_seconds_bucket{{{selector}}}[1m])))",
        "tokens_per_s": "sum(rate(sglang:prompt_tokens_total{{{selector}}}[1m])) + "
                        "sum(rate(sglang:generation_tokens_total{{{selector}}}[1m]))",
        "finished_rps": "sum(rate(sglang:num_requests_total{{{selector}}}[1m]))",
    },
}
# The simulated cluster's request stream: the Azure LLM trace's per-minute arrivals (built in),
# times this factor, looped; the demo's autoscaled deployment follows it.
AUTOSCALE_SIMULATED_LOAD_FACTOR = float(env_str("GPUPLANE_AUTOSCALE_SIMULATED_LOAD_FACTOR", "1.0"))
# What share of its predicted throughput each simulated GPU model really delivers (GPU model ->
# fraction, default 1): an under-delivering model for the feedback to find.
AUTOSCALE_SIMULATED_DELIVERY = env_number_map("GPUPLANE_AUTOSCALE_SIMULATED_DELIVERY")
# Feedback: weight of a new measurement in a correction factor, how far a learned weight may leave
# its default (fraction), the step of one update, and whether learning runs at all.
FEEDBACK = env_number_map("GPUPLANE_FEEDBACK")
FEEDBACK_ENABLED = env_bool("GPUPLANE_FEEDBACK_ENABLED", True)


AUTOSCALE_BEAT = {
    "autoscale-deployments": {
        "task": "scheduler.tasks.autoscale_deployments_task",
        "schedule": float(AUTOSCALE_INTERVAL_S),
        "options": {"expires": AUTOSCALE_INTERVAL_S * 0.9},
    },
}
