"""A per-GPU serving model of an LLM inference engine (vLLM-like continuous batching).

Pure Python. Used for two things: the prediction made at placement (how many requests per second
a replica on this GPU model and sharing mode serves within the SLO, which the feedback corrects
with what is measured) and the simulated replicas of ``bench/autoscale_replay.py``.

Model served: Llama-3.1-8B-Instruct in FP16 (8.03 B parameters, 16.06 GB of weights; KV cache
131,072 bytes per token = 2 x 32 layers x 8 KV heads x 128 x 2 bytes, Meta's model card / config).
Figures per GPU model (FP16 dense tensor TFLOPS and memory from the catalog, i.e. NVIDIA's
datasheets; memory bandwidth from the same datasheets):

| GPU            | FP16 TFLOPS | HBM/GDDR GB/s | memory MiB | prefill tok/s | weight read ms/step | KV tokens |
|----------------|-------------|---------------|------------|---------------|---------------------|-----------|
| L4             | 121         | 300           | 23,034     | 3,767         | 66.9                | 31,900    |
| L40S           | 362         | 864           | 46,068     | 11,270        | 23.2                | 197,700   |
| A100-SXM4-40GB | 312         | 1,555         | 40,960     | 9,714         | 12.9                | 160,900   |
| A100-SXM4-80GB | 312         | 2,039         | 81,920     | 9,714         | 9.8                 | 455,800   |
| H100-SXM5-80GB | 989         | 3,350         | 81,559     | 30,790        | 6.0                 | 453,200   |

- Prefill is compute-bound: tokens/s = TFLOPS x MFU / (2 x parameters), MFU 0.5 (vLLM prefill
  reaches 40-60 % of dense peak at these sizes).
- Decode is memory-bound: one iteration reads the weights once plus each running sequence's KV
  cache, at 80 % of the datasheet bandwidth (what STREAM-like copies reach on these boards).
  Iteration time = weights / bandwidth + sum(context tokens) x KV bytes / bandwidth; with
  chunked prefill an iteration also carries up to ``chunk_tokens`` (2,048, vLLM's
  ``max_num_batched_tokens``) prompt tokens at the prefill rate.
- KV tokens: 90 % of the board's memory (vLLM's ``gpu_memory_utilization``) minus weights minus
  1.5 GB of activations and CUDA graphs, over the KV bytes per token; a request holds its prompt
  plus output tokens from admission (no preemption), ``max_num_seqs`` 256.
- Cold start: 45 s from the replica's creation to serving (pod start with the image cached on
  the node, weights read from local NVMe at about 2 GB/s, CUDA-graph capture); an assumption
  stated here, replaced in the product by the cold start gpuplane measures.
- Sharing: ``exclusive`` 1; ``mps``/``mps-weighted`` with a share s: prefill and bandwidth x s
  (both clients busy, the worst case); ``timeslice`` with R replicas: 1/R, less 10 % for context
  switches; memory shares likewise. MIG is sized by its compute slices out of 7.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

PARAMETERS = 8.03e9
WEIGHT_BYTES = 16.06e9
KV_BYTES_PER_TOKEN = 131_072
MFU = 0.5
BANDWIDTH_EFFICIENCY = 0.8
MEMORY_UTILIZATION = 0.9
ACTIVATION_BYTES = 1.5e9
CHUNK_TOKENS = 2048
MAX_NUM_SEQS = 256
COLD_START_S = 45.0
STEP_OVERHEAD_S = 0.002  # scheduler + sampling per iteration

# GPU model -> (FP16 dense TFLOPS, memory bandwidth GB/s, memory MiB)
GPU_FIGURES: dict[str, tuple[float, float, int]] = {
    "L4": (121.0, 300.0, 23034),
    "L40S": (362.0, 864.0, 46068),
    "A100-SXM4-40GB": (312.0, 1555.0, 40960),
    "A100-SXM4-80GB": (312.0, 2039.0, 81920),
    "H100-SXM5-80GB": (989.0, 3350.0, 81559),
}


@dataclass(frozen=True)
class ServingFigures:
    """What one replica of the model delivers on one GPU model and sharing mode."""

    gpu_model: str
    sharing_mode: str
    prefill_tokens_per_s: float
    weight_read_s: float  # per decode iteration
    kv_read_s_per_token: float  # per context token held by a running sequence, per iteration
    kv_tokens: int
    max_num_seqs: int = MAX_NUM_SEQS
    chunk_tokens: int = CHUNK_TOKENS
    cold_start_s: float = COLD_START_S

    def iteration_s(self, running: int, context_tokens: float, prefill_tokens: float) -> float:
        """One engine iteration with ``running`` decoding sequences holding ``context_tokens`` in
        all, and ``prefill_tokens`` of prompt chunked into it."""
        decode = (self.weight_read_s + context_tokens * self.kv_read_s_per_token) if running else 0.0
        return STEP_OVERHEAD_S + decode + prefill_tokens / self.prefill_tokens_per_s


def sharing_factor(sharing_mode: str, share_milli: int = 1000, replicas: int = 1) -> float:
    if sharing_mode in ("mps", "mps-weighted", "mig"):
        return share_milli / 1000
    if sharing_mode == "timeslice":
        return 0.9 / max(replicas, 1)
    return 1.0


def figures_for(gpu_model: str, sharing_mode: str = "exclusive", share_milli: int = 1000,
                replicas: int = 1) -> ServingFigures:
    """The serving figures of the model on ``gpu_model`` (KeyError for a model without figures)."""
    tflops, bandwidth_gbs, memory_mib = GPU_FIGURES[gpu_model]
    factor = sharing_factor(sharing_mode, share_milli, replicas)
    bandwidth = bandwidth_gbs * 1e9 * BANDWIDTH_EFFICIENCY * factor
    memory = memory_mib * 1024 * 1024 * factor
    kv_tokens = max(0, int((memory * MEMORY_UTILIZATION - WEIGHT_BYTES - ACTIVATION_BYTES) / KV_BYTES_PER_TOKEN))
    return ServingFigures(
        gpu_model=gpu_model,
        sharing_mode=sharing_mode,
        prefill_tokens_per_s=tflops * 1e12 * MFU * factor / (2 * PARAMETERS),
        weight_read_s=WEIGHT_BYTES / bandwidth,
        kv_read_s_per_token=KV_BYTES_PER_TOKEN / bandwidth,
        kv_tokens=kv_tokens,
    )


@dataclass(frozen=True)
class Prediction:
    """Steady state of one replica at ``capacity_rps``: the highest arrival rate it serves with
    the TPOT objective met, prefill busy at most ``prefill_busy_max``, within its KV cache."""

    capacity_rps: float
    tpot_s: float
    running: float
    prefill_busy: float


def steady_state(figures: ServingFigures, rate_rps: float, mean_prompt: float, mean_output: float) -> Prediction | None:
    """The replica at ``rate_rps`` arrivals (None when it cannot keep up at all)."""
    busy = rate_rps * mean_prompt / figures.prefill_tokens_per_s
    if busy >= 1:
        return None
    # Little's law for the decoding sequences: running = rate x output tokens x iteration time;
    # the iteration time grows with what runs (fixed point, solved in closed form).
    per_seq = (mean_prompt + mean_output / 2) * figures.kv_read_s_per_token
    base = figures.weight_read_s + STEP_OVERHEAD_S
    denominator = (1 - busy) - rate_rps * mean_output * per_seq
    if denominator <= 0:
        return None
    tpot = base / denominator
    running = rate_rps * mean_output * tpot
    if running * (mean_prompt + mean_output) > figures.kv_tokens or running > figures.max_num_seqs:
        return None
    return Prediction(rate_rps, tpot, running, busy)


def predict_capacity(figures: ServingFigures, mean_prompt: float, mean_output: float, tpot_slo_s: float,
                     prefill_busy_max: float = 0.6) -> Prediction:
    """The highest request rate one replica serves within ``tpot_slo_s`` (bisection)."""
    low, high = 0.0, figures.prefill_tokens_per_s / max(mean_prompt, 1.0)
    best = Prediction(0.0, math.inf, 0.0, 0.0)
    for _ in range(50):
        middle = (low + high) / 2
        state = steady_state(figures, middle, mean_prompt, mean_output)
        if state is not None and state.tpot_s <= tpot_slo_s and state.prefill_busy <= prefill_busy_max:
            best, low = state, middle
        else:
            high = middle
    return best


def with_cold_start(figures: ServingFigures, cold_start_s: float) -> ServingFigures:
    return replace(figures, cold_start_s=cold_start_s)
