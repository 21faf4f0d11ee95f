"""Autoscaling replay (docs/design.md section 7, "Protocol"): a real trace's arrivals against one
deployment, scaled by the product's own policy code and placed by its own placement engine.

    python bench/autoscale_replay.py --trace ../shared/data/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv \\
        --policy gpuplane --json

**SLO (stated before any tuning, and kept):** a request is within the SLO when its time to first
token (arrival to first output token, queueing included) is at most **2.0 s** and its time per
output token (first to last token over the remaining tokens) is at most **0.2 s** (5 tokens/s,
faster than people read). A request still unfinished 600 s after the trace's end is outside it.

**Deployment and cluster.** Llama-3.1-8B-Instruct (FP16) served by a vLLM-like engine, one
replica per whole GPU (``exclusive``), on an inference pool of 8 nodes x 4 NVIDIA L4 (a GKE
``g2-standard-48`` shape; 32 GPUs, ``max_replicas`` 32). Every new replica is a
``PlacementRequest`` placed by ``Scheduler.schedule`` with the API's ``balanced`` profile on a
``ClusterSnapshot`` of that pool (as ``bench/trace_replay.py`` does); every removed replica
drains (no new requests, finishes what it holds) and then releases its GPU. GPU-hours count
each replica from its placement to its release, cold start and drain included.

**Serving model** (``scheduler.core.serving``; its docstring has the table and the sources):
on an L4, prefill 3,767 prompt tokens/s (121 FP16 TFLOPS x 0.5 MFU / 2 x 8.03 B parameters),
decode iterations of 66.9 ms weight read (16.06 GB at 80 % of 300 GB/s) plus 0.55 ms per
1,000 context tokens of KV cache held, chunked prefill of up to 2,048 tokens per iteration,
31,900 KV tokens (a request holds prompt + output from admission), at most 256 sequences,
cold start 45 s. Predicted capacity within the TPOT objective for the trace's mean request
(1,155 prompt, 211 output tokens): 0.93 requests/s per replica.

**Engine simulation**: time steps of 0.1 s; per replica, an iteration carries its decoding
sequences and a prefill chunk; iterations per step = 0.1 s / iteration time; prompt tokens are
served first come first served; first-token and finish times are interpolated inside the step.
A gateway queue holds arrivals until a ready replica has a sequence slot and KV room (least
loaded first). Deterministic: no randomness except ``--seed``'s jitter of cold starts (+-10 %).

**What each policy sees** (every ``interval``): queue = requests waiting at the gateway and in
engines before prefill (``vllm:num_requests_waiting``); arrivals per second over the last 20 s;
running requests; GPU utilization (share of the step a replica's engine was busy); efficiency
(TOPS/W: 2 x parameters x tokens per second over the replicas' board power, 72 W per L4); cost
per inference (USD per GPU-hour of an L4, 0.80, over requests finished per hour); TTFT p95 of
the last 30 s; the predicted capacity per replica; the measured cold start. Intervals: gpuplane
5 s (its 15 s reaction), hpa 15 s (the HPA controller's sync period), seed 30 s (the seed's
monitoring loop). ``static-peak`` runs ceil(peak one-minute arrival rate / predicted capacity)
replicas for the whole trace; the others start, ready, with the count that the busiest minute of
the first five needs (the service was live before the trace's hour began).

Prints one JSON object (``--json``) with ``policy``, ``requests``, ``slo_attainment_pct``,
``gpu_hours``, ``replica_changes``, ``reversals_per_10min``, ``ttft_p99_s`` and more. Accepts any
CSV with the columns ``TIMESTAMP, ContextTokens, GeneratedTokens`` (arrivals in file order;
``--speed`` multiplies the arrival rate by a stated factor, ``--limit`` keeps the first N rows).
"""
from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import random
import sys
from collections import deque
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.serving_sim import TPOT_SLO_S, TTFT_SLO_S, Replica, Request, percentile, within_slo  # noqa: E402
from nodes.vocabulary import SharingMode  # noqa: E402
from scheduler.core.autoscale import (  # noqa: E402
    AutoscaleSettings,
    ReplicaView,
    Sample,
    ScalingState,
    choose_victim,
    decide,
    reversals,
)
from scheduler.core.profiles import scheduler_for  # noqa: E402
from scheduler.core.serving import (  # noqa: E402
    PARAMETERS,
    figures_for,
    predict_capacity,
    with_cold_start,
)
from scheduler.core.snapshot import ClusterSnapshot  # noqa: E402
from scheduler.core.types import NodeState, PlacementRequest, SharingRequest, new_gpus  # noqa: E402

DT = 0.1
GPU_MODEL = "L4"
NODES, GPUS_PER_NODE = 8, 4
USD_PER_GPU_HOUR = 0.80  # nodes.gpu_costs' default for an L4
BOARD_POWER_W = 72.0
MEMORY_MIB = 20_000  # what a replica asks of its GPU: weights, KV cache and activations
DRAIN_LIMIT_S = 600.0
ARRIVAL_WINDOW_S = 20.0  # arrivals per second are counted over this window
INTERVALS = {"gpuplane": 5.0, "hpa": 15.0, "seed": 30.0, "static-peak": 30.0}
POLICY_NAMES = {"gpuplane": "gpuplane", "hpa": "hpa", "seed": "seed", "static-peak": "static"}


def parse_time(text: str) -> float:
    """Seconds since the epoch of a trace timestamp (100 ns digits kept)."""
    head, _, fraction = text.strip().partition(".")
    seconds = datetime.fromisoformat(head).timestamp()
    return seconds + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def load_trace(path: Path, speed: float = 1.0, limit: int | None = None) -> list[tuple[float, int, int]]:
    """(arrival s from the first, prompt tokens, output tokens) per row, in file order."""
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise SystemExit(f"{path}: missing columns {', '.join(sorted(missing))}")
        rows = []
        for number, row in enumerate(reader):
            if limit is not None and number >= limit:
                break
            rows.append((parse_time(row["TIMESTAMP"]), int(row["ContextTokens"]), max(1, int(row["GeneratedTokens"]))))
    if not rows:
        raise SystemExit(f"{path}: no requests")
    start = rows[0][0]
    return [((t - start) / speed, c, g) for t, c, g in rows]


def pool() -> ClusterSnapshot:
    nodes = [NodeState(name=f"l4-node-{i}", gpu_model=GPU_MODEL, sharing_mode=SharingMode.EXCLUSIVE,
                       gpus=new_gpus(GPU_MODEL, GPUS_PER_NODE), labels={"kubernetes.io/hostname": f"l4-node-{i}"})
             for i in range(NODES)]
    return ClusterSnapshot(nodes)


class Replay:
    def __init__(self, trace: list[tuple[float, int, int]], policy: str, seed: int = 0,
                 overrides: dict[str, float] | None = None, static_replicas: int | None = None) -> None:
        self.static_replicas = static_replicas
        self.trace = trace
        self.policy = policy
        self.random = random.Random(seed)
        self.snapshot = pool()
        self.scheduler = scheduler_for("balanced")
        self.figures = figures_for(GPU_MODEL)
        prompts = [c for _, c, _ in trace]
        outputs = [g for _, _, g in trace]
        # The prediction a placement makes for the model on this GPU (the workload's mean request).
        self.capacity = predict_capacity(self.figures, sum(prompts) / len(prompts), sum(outputs) / len(outputs),
                                         TPOT_SLO_S).capacity_rps
        self.settings = AutoscaleSettings.from_dict(
            {"min_replicas": 1, "max_replicas": NODES * GPUS_PER_NODE, "ttft_slo_s": TTFT_SLO_S,
             "tpot_slo_s": TPOT_SLO_S, **(overrides or {})})
        self.replicas: list[Replica] = []
        self.retired: list[Replica] = []
        self.number = 0
        self.unplaced = 0
        self.decisions: list[dict[str, object]] = []
        self.changes: list[tuple[float, int]] = []
        self.cold_starts: list[float] = []

    def minute_need(self, start: float, end: float) -> int:
        times = [t for t, _, _ in self.trace]
        count = bisect.bisect_left(times, end) - bisect.bisect_left(times, start)
        return max(1, math.ceil(count / (end - start) / self.capacity - 1e-9))

    def peak_need(self) -> int:
        times = [t for t, _, _ in self.trace]
        end = times[-1]
        best = 1
        start = 0.0
        while start <= end:
            best = max(best, self.minute_need(start, start + 60.0))
            start += 10.0
        return best

    def place(self, now: float, ready_now: bool = False) -> bool:
        self.number += 1
        key = f"replay/llama-8b#{self.number}"
        request = PlacementRequest(key=key, memory_mib=MEMORY_MIB, gpu_count=1, sharing=SharingRequest.EXCLUSIVE,
                                   gpu_models=(GPU_MODEL,), allow_default_scheduler=False)
        result = self.scheduler.schedule(request, self.snapshot)
        if result.assignment is None or result.node is None:
            self.unplaced += 1
            return False
        cold = 0.0 if ready_now else self.figures.cold_start_s * self.random.uniform(0.9, 1.1)
        figures = with_cold_start(self.figures, cold)
        self.replicas.append(Replica(key, result.node, figures, now, now + cold))
        return True

    def release(self, replica: Replica, now: float) -> None:
        replica.released_at = now
        self.snapshot.release(replica.node, replica.key)
        self.replicas.remove(replica)
        self.retired.append(replica)

    def active(self) -> list[Replica]:
        return [r for r in self.replicas if not r.draining]

    def scale_to(self, wanted: int, now: float) -> None:
        current = len(self.active())
        for _ in range(wanted - current):
            self.place(now)
        for _ in range(current - wanted):
            views = [ReplicaView(r.key, USD_PER_GPU_HOUR, self.capacity, r.ready(now), r.placed_at)
                     for r in self.active()]
            victim = choose_victim(views)
            if victim is None:
                break
            replica = next(r for r in self.replicas if r.key == victim.key)
            replica.draining = True
            if not replica.holds:
                self.release(replica, now)

    def run(self) -> dict[str, object]:
        trace = self.trace
        requests = [Request(t, c, g) for t, c, g in trace]
        end = trace[-1][0]
        policy_name = POLICY_NAMES[self.policy]
        interval = INTERVALS[self.policy]
        if self.policy == "static-peak":
            initial = self.static_replicas or self.peak_need()
        else:
            initial = max(self.minute_need(start, start + 60.0) for start in range(0, 241, 10))
        for _ in range(initial):
            self.place(0.0, ready_now=True)
        state = ScalingState(replicas=len(self.replicas))
        self.changes.append((0.0, state.replicas))
        gateway: deque[Request] = deque()
        done: list[Request] = []
        arrivals: deque[float] = deque()
        first_tokens: deque[tuple[float, float]] = deque()
        finished_times: deque[float] = deque()
        next_request = 0
        next_eval = interval
        busy_mark: dict[str, float] = {}
        tokens_mark = 0.0
        now = 0.0
        steps = 0
        while True:
            now = steps * DT
            steps += 1
            while next_request < len(requests) and requests[next_request].arrival <= now:
                gateway.append(requests[next_request])
                arrivals.append(requests[next_request].arrival)
                next_request += 1
            # Dispatch: least loaded ready replica with room, first come first served.
            ready = [r for r in self.replicas if not r.draining and r.ready(now)]
            while gateway and ready:
                request = gateway[0]
                fitting = [r for r in ready if r.fits(request)]
                if not fitting:
                    break
                target = min(fitting, key=lambda r: (r.holds, r.kv_used, r.key))
                target.admit(gateway.popleft())
            finished_before = len(done)
            for replica in list(self.replicas):
                replica.step(now, DT, done)
                if replica.draining and not replica.holds:
                    self.release(replica, now + DT)
            for request in done[finished_before:]:
                finished_times.append(request.finished or now)
                first_tokens.append((request.first_token or now, (request.first_token or now) - request.arrival))
            for replica in self.replicas:
                if not replica.draining and replica.ready_at > replica.placed_at and replica.ready_at <= now < replica.ready_at + DT:
                    self.cold_starts.append(replica.ready_at - replica.placed_at)
            if now >= next_eval and now <= end:
                next_eval += interval
                sample, busy_mark, tokens_mark = self.sample(now, gateway, arrivals, first_tokens, finished_times,
                                                             busy_mark, tokens_mark, interval)
                decision, state = decide(policy_name, sample, state, now, self.settings)
                if decision.changes:
                    self.scale_to(decision.replicas, now)
                    self.changes.append((now, decision.replicas))
                    self.decisions.append({"t": round(now, 1), "action": decision.action, "replicas": decision.replicas,
                                           "reason": decision.reason})
                # What the cluster really runs (a placement may have failed).
                state = ScalingState(**{**state.__dict__, "replicas": len(self.active())})
            if next_request >= len(requests) and not gateway and all(not r.holds for r in self.replicas):
                break
            if now > end + DRAIN_LIMIT_S:
                break
        for replica in list(self.replicas):
            self.release(replica, now)
        return self.summary(requests, end)

    def sample(self, now: float, gateway: deque[Request], arrivals: deque[float],
               first_tokens: deque[tuple[float, float]], finished_times: deque[float],
               busy_mark: dict[str, float], tokens_mark: float, interval: float) -> tuple[Sample, dict[str, float], float]:
        while arrivals and arrivals[0] < now - ARRIVAL_WINDOW_S:
            arrivals.popleft()
        while first_tokens and first_tokens[0][0] < now - 30.0:
            first_tokens.popleft()
        while finished_times and finished_times[0] < now - 60.0:
            finished_times.popleft()
        waiting = len(gateway) + sum(sum(1 for q in r.prefill if q.prefill_left >= q.prompt) for r in self.replicas)
        running = sum(r.holds for r in self.replicas)
        live = self.replicas
        busy = {r.key: r.busy_s for r in live}
        span = interval * max(len(live), 1)
        busy_delta = sum(busy[k] - busy_mark.get(k, 0.0) for k in busy)
        utilization = 100.0 * min(1.0, busy_delta / span)
        tokens_total = sum(r.tokens for r in live) + sum(r.tokens for r in self.retired)
        tokens_rate = max(0.0, tokens_total - tokens_mark) / interval
        power = BOARD_POWER_W * max(len(live), 1)
        efficiency = 2 * PARAMETERS * tokens_rate / 1e12 / power
        per_hour = len(finished_times) * 60.0
        cost = (USD_PER_GPU_HOUR * len(live) / per_hour) if per_hour else float("inf")
        ttfts = [v for _, v in first_tokens]
        sample = Sample(
            at=now, queue=float(waiting), running=float(running), arrival_rps=len(arrivals) / min(ARRIVAL_WINDOW_S, max(now, DT)),
            utilization_pct=utilization, efficiency_tops_per_w=efficiency,
            cost_per_inference_usd=cost if math.isfinite(cost) else 1.0,
            ttft_p95_s=percentile(ttfts, 95) if ttfts else None, capacity_rps_per_replica=self.capacity,
            cold_start_s=(sum(self.cold_starts) / len(self.cold_starts)) if self.cold_starts else None,
            ready_replicas=float(sum(1 for r in live if not r.draining and r.ready(now))))
        return sample, busy, tokens_total

    def summary(self, requests: list[Request], end: float) -> dict[str, object]:
        everything = self.retired
        gpu_hours = sum(((r.released_at or end) - r.placed_at) for r in everything) / 3600.0
        good = sum(1 for r in requests if within_slo(r))
        ttfts = [(r.first_token - r.arrival) if r.first_token is not None else math.inf for r in requests]
        tpots = [((r.finished - r.first_token) / (r.output - 1)) for r in requests
                 if r.finished is not None and r.first_token is not None and r.output > 1]
        minutes = max(end, 1.0) / 600.0
        flips = reversals(self.changes)
        counts = [n for _, n in self.changes]
        return {
            "policy": self.policy,
            "requests": len(requests),
            "slo": {"ttft_s": TTFT_SLO_S, "tpot_s": TPOT_SLO_S},
            "slo_attainment_pct": round(100.0 * good / len(requests), 3),
            "gpu_hours": round(gpu_hours, 3),
            "replica_changes": len(self.changes) - 1,
            "reversals": flips,
            "reversals_per_10min": round(flips / minutes, 3),
            "ttft_p50_s": round(percentile(ttfts, 50), 3),
            "ttft_p99_s": round(percentile(ttfts, 99), 3),
            "tpot_p99_s": round(percentile(tpots, 99), 4),
            "replicas_min": min(counts),
            "replicas_max": max(counts),
            "capacity_rps_per_replica": round(self.capacity, 4),
            "unplaced": self.unplaced,
            "duration_s": round(end, 1),
            "gpu_model": GPU_MODEL,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--policy", choices=tuple(INTERVALS), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed", type=float, default=1.0, help="arrival-rate factor (2 = twice as fast)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N requests")
    parser.add_argument("--decisions", action="store_true", help="include every scaling decision")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override an autoscale setting (scheduler.core.autoscale.AutoscaleSettings)")
    parser.add_argument("--replicas", type=int, default=None, help="static-peak: this many instead of the peak's need")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    overrides = {name: float(value) for name, _, value in (item.partition("=") for item in args.set)}
    replay = Replay(load_trace(args.trace, args.speed, args.limit), args.policy, args.seed, overrides, args.replicas)
    result = replay.run()
    if args.decisions:
        result["decisions"] = replay.decisions
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['policy']:12} SLO {result['slo_attainment_pct']:.2f} %  GPU-hours {result['gpu_hours']:.2f}  "
              f"changes {result['replica_changes']}  reversals/10 min {result['reversals_per_10min']:.2f}  "
              f"TTFT p99 {result['ttft_p99_s']:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
