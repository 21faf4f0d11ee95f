"""The simulated serving engine of ``bench/autoscale_replay.py``: requests and replicas.

A replica runs vLLM-like continuous batching with chunked prefill on the figures of
``scheduler.core.serving`` (its docstring has them and their sources): per time step, iterations
of its decoding sequences plus a prompt chunk; prompt tokens first come first served; first-token
and finish times interpolated inside the step. A request holds its prompt plus output tokens of
KV cache from admission to finish.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from scheduler.core.serving import ServingFigures

TTFT_SLO_S = 2.0
TPOT_SLO_S = 0.2


@dataclass
class Request:
    arrival: float
    prompt: int
    output: int
    first_token: float | None = None
    finished: float | None = None
    prefill_left: float = 0.0


@dataclass
class Replica:
    key: str
    node: str
    figures: ServingFigures
    placed_at: float
    ready_at: float
    draining: bool = False
    released_at: float | None = None
    prefill: deque[Request] = field(default_factory=deque)
    prefill_tokens: float = 0.0
    decoding: list[tuple[float, int, Request]] = field(default_factory=list)  # (finish iteration, id, request)
    context_tokens: float = 0.0
    iterations: float = 0.0
    kv_used: int = 0
    busy_s: float = 0.0
    tokens: float = 0.0

    @property
    def holds(self) -> int:
        return len(self.prefill) + len(self.decoding)

    def ready(self, now: float) -> bool:
        return now >= self.ready_at

    def admit(self, request: Request) -> None:
        request.prefill_left = request.prompt
        self.prefill.append(request)
        self.prefill_tokens += request.prompt
        self.kv_used += request.prompt + request.output

    def fits(self, request: Request) -> bool:
        return (self.holds < self.figures.max_num_seqs
                and self.kv_used + request.prompt + request.output <= self.figures.kv_tokens)

    def step(self, now: float, dt: float, done: list[Request]) -> None:
        running = len(self.decoding)
        if not running and not self.prefill:
            return
        chunk = min(self.prefill_tokens, max(self.figures.chunk_tokens - running, 0))
        iteration = self.figures.iteration_s(running, self.context_tokens, chunk)
        count = dt / iteration
        self.busy_s += dt
        start_iterations = self.iterations
        # Prompt tokens, first come first served; a finished prefill yields the first token.
        budget = count * chunk
        used = 0.0
        while self.prefill and budget - used > 1e-9:
            request = self.prefill[0]
            take = min(request.prefill_left, budget - used)
            request.prefill_left -= take
            used += take
            if request.prefill_left > 1e-9:
                break
            self.prefill.popleft()
            fraction = used / budget if budget else 1.0
            request.first_token = now + dt * fraction
            self.tokens += request.prompt + 1
            if request.output <= 1:
                self._finish(request, request.first_token, done)
            else:
                finish_at = start_iterations + count * fraction + request.output - 1
                heapq.heappush(self.decoding, (finish_at, id(request), request))
                self.context_tokens += request.prompt + request.output / 2
        self.prefill_tokens = max(0.0, self.prefill_tokens - used)
        if running:
            self.iterations += count
            self.tokens += count * running
        else:
            self.iterations += count
        while self.decoding and self.decoding[0][0] <= self.iterations:
            finish_at, _, request = heapq.heappop(self.decoding)
            self.context_tokens -= request.prompt + request.output / 2
            when = now + dt * min(1.0, max(0.0, (finish_at - start_iterations) / count))
            self._finish(request, max(when, request.first_token or when), done)

    def _finish(self, request: Request, when: float, done: list[Request]) -> None:
        request.finished = when
        self.kv_used -= request.prompt + request.output
        done.append(request)


def within_slo(request: Request) -> bool:
    if request.first_token is None or request.finished is None:
        return False
    ttft = request.first_token - request.arrival
    tpot = (request.finished - request.first_token) / (request.output - 1) if request.output > 1 else 0.0
    return ttft <= TTFT_SLO_S + 1e-9 and tpot <= TPOT_SLO_S + 1e-9


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]
