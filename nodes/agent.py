"""TelemetryAgent: the node agent loop behind `manage.py gpuplane_agent` (one per GPU node, a DaemonSet).

Every `interval_s` it reads the node's GPUs (NVML), appends the samples to a bounded in-memory
buffer and posts the buffer to the server in batches (`POST {server}/api/v1/telemetry/`,
`Authorization: Bearer <agent token>`, body `{"node": NAME, "samples": [...]}`).

Delivery rules, which together give "every sample exactly once" while the buffer does not
overflow:

- A sample leaves the buffer only after the server answered 2xx for its batch. A lost answer
  (connection reset after the server stored the batch) makes the agent send the batch again;
  the server's unique (GPU, ts) key turns the repeat into `duplicates`, so nothing is stored twice.
- Connection failures, timeouts, 5xx and 429 are retried with exponential backoff and jitter
  (`backoff_base_s` x 2^(failures-1), capped at `backoff_max_s`, times a random factor in
  [0.5, 1] so that a fleet of agents does not hammer a server that just came back in lockstep;
  a 429/503 Retry-After is honoured). Collection goes on meanwhile.
- Any other 4xx means the batch itself is refused (a GPU the server does not know yet, a revoked
  token): the batch is dropped and logged; it would be refused forever.
- The buffer holds at most `max_buffer_samples`; when full, the oldest samples are dropped,
  counted in `stats.dropped_overflow` and logged, so a long outage costs the oldest data, never
  the agent's memory.

No Django model is imported: the agent runs on GPU nodes without a database.
"""
from __future__ import annotations

import http.client
import json
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any

from nodes.collectors.base import Collector, CollectorUnavailable, GPUReading

logger = logging.getLogger(__name__)

TELEMETRY_PATH = "/api/v1/telemetry/"
DEFAULT_INTERVAL_S = 30.0
# 10,000 samples: about 20 minutes of an 8-GPU node at 30 s, a few MB of memory.
DEFAULT_MAX_BUFFER_SAMPLES = 10_000
DEFAULT_BATCH_SIZE = 500
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_MAX_S = 300.0
_RETRYABLE_STATUS = {429, 500, 502, 503, 504}


@dataclass
class AgentStats:
    """Counters since the agent started."""

    collected: int = 0  # samples appended to the buffer
    delivered: int = 0  # samples in batches the server answered 2xx for
    duplicates: int = 0  # of those, samples the server already had (re-sends)
    dropped_overflow: int = 0  # oldest samples pushed out of a full buffer
    dropped_rejected: int = 0  # samples in batches the server refused with a 4xx
    failed_posts: int = 0  # posts that will be retried (connection errors, 5xx, 429)


@dataclass(frozen=True)
class _PostResult:
    outcome: str  # "ok" | "retry" | "drop"
    status: int | None
    detail: str = ""
    body: dict[str, Any] | None = None
    retry_after_s: float | None = None


def sample_payload(reading: GPUReading) -> dict[str, Any]:
    """One reading as the API's sample object; metrics that were not measured are null."""
    return {"gpu_uuid": reading.gpu_uuid, "ts": reading.ts.isoformat(), **reading.sample_values()}


class TelemetryAgent:
    """Collect, buffer and post one node's GPU samples; see the module docstring.

    `sleep` (default: an interruptible wait) and `clock` (monotonic seconds) are injectable so
    that tests drive time; `rng`
    makes the jitter reproducible. `run()` loops until `stop()`; `collect_once()` and `flush()`
    are its two steps, and `run_once()` is `--once`.
    """

    def __init__(
        self,
        server_url: str,
        token: str,
        node_name: str,
        collector: Collector,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_buffer_samples: int = DEFAULT_MAX_BUFFER_SAMPLES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_base_s: float | None = None,
        backoff_max_s: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if interval_s <= 0 or max_buffer_samples < 1 or batch_size < 1:
            raise ValueError("interval_s must be > 0, max_buffer_samples and batch_size >= 1")
        self.url = server_url.rstrip("/") + TELEMETRY_PATH
        self.token = token
        self.node_name = node_name
        self.collector = collector
        self.interval_s = interval_s
        self.max_buffer_samples = max_buffer_samples
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        # None: the module defaults, read now (not at import) so that they can be tuned in one place.
        self.backoff_base_s = DEFAULT_BACKOFF_BASE_S if backoff_base_s is None else backoff_base_s
        self.backoff_max_s = DEFAULT_BACKOFF_MAX_S if backoff_max_s is None else backoff_max_s
        # The default sleep wakes up early when stop() is called (SIGTERM must not wait an interval).
        self._wake = threading.Event()
        self._sleep = sleep or self._wake.wait
        self._clock = clock
        self._rng = rng or random.Random()
        self.buffer: deque[dict[str, Any]] = deque()
        self.stats = AgentStats()
        self.consecutive_failures = 0
        self.retry_at = 0.0  # clock() before which no post is attempted (backoff)
        self._stopped = False

    # --- the two steps ------------------------------------------------------------------------
    def collect_once(self) -> int:
        """Read the GPUs and buffer one sample per GPU that reported a metric; return how many.

        A collector that cannot read at all (driver restarting) is logged and yields nothing:
        the agent keeps running and tries again next interval.
        """
        try:
            readings = self.collector.collect()
        except CollectorUnavailable as exc:
            logger.error("telemetry agent: cannot read the GPUs: %s", exc)
            return 0
        samples = [sample_payload(reading) for reading in readings if reading.has_metrics]
        self.buffer.extend(samples)
        overflow = max(0, len(self.buffer) - self.max_buffer_samples)
        for _ in range(overflow):
            self.buffer.popleft()
        if overflow:
            self.stats.dropped_overflow += overflow
            logger.warning(
                "telemetry agent: buffer full (%d samples): dropped the %d oldest (%d dropped so far); server unreachable?",
                self.max_buffer_samples, overflow, self.stats.dropped_overflow,
            )
        self.stats.collected += len(samples)
        return len(samples)

    def flush(self, *, force: bool = False) -> bool:
        """Post buffered samples in batches, oldest first, unless backing off; True when the buffer is empty.

        Stops at the first batch that must be retried and schedules the retry (`retry_at`).
        `force` tries once even while backing off (the last attempt before the agent exits).
        """
        while self.buffer:
            if not force and self._clock() < self.retry_at:
                return False
            batch = list(islice(self.buffer, 0, self.batch_size))
            result = self._post(batch)
            if result.outcome == "retry":
                self._back_off(result)
                return False
            for _ in batch:
                self.buffer.popleft()
            self.consecutive_failures = 0
            self.retry_at = 0.0
            if result.outcome == "ok":
                self.stats.delivered += len(batch)
                self.stats.duplicates += int((result.body or {}).get("duplicates", 0) or 0)
            else:
                self.stats.dropped_rejected += len(batch)
                logger.error(
                    "telemetry agent: server refused a batch of %d samples (HTTP %s), dropped: %s",
                    len(batch), result.status, result.detail,
                )
        return True

    # --- loops --------------------------------------------------------------------------------
    def run(self, *, max_ticks: int | None = None) -> None:
        """Collect every `interval_s` and deliver in between, until `stop()` (or `max_ticks` collections).

        A collection that falls behind (a long stall) is not made up for: the next one is one
        interval from now.
        """
        next_collect = self._clock()
        ticks = 0
        while not self._stopped:
            now = self._clock()
            if now >= next_collect:
                self.collect_once()
                ticks += 1
                next_collect += self.interval_s
                if next_collect <= now:
                    next_collect = now + self.interval_s
            self.flush()
            if max_ticks is not None and ticks >= max_ticks:
                break
            wake = next_collect
            if self.buffer:
                wake = min(wake, self.retry_at)
            self._sleep(max(0.0, wake - self._clock()))

    def run_once(self, *, attempts: int = 3) -> bool:
        """`--once`: collect one round and try to deliver it, backing off up to `attempts` posts.

        Returns True when everything was delivered (or refused by the server and dropped).
        """
        self.collect_once()
        for attempt in range(attempts):
            if self.flush():
                return True
            if attempt < attempts - 1:
                self._sleep(max(0.0, self.retry_at - self._clock()))
        return False

    def stop(self) -> None:
        """Ask `run()` to return after its current step (signal handlers call this)."""
        self._stopped = True
        self._wake.set()

    def stats_dict(self) -> dict[str, int]:
        return {**asdict(self.stats), "buffered": len(self.buffer)}

    # --- HTTP -----------------------------------------------------------------------------------
    def _back_off(self, result: _PostResult) -> None:
        self.consecutive_failures += 1
        self.stats.failed_posts += 1
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (self.consecutive_failures - 1))
        delay = ceiling * self._rng.uniform(0.5, 1.0)
        if result.retry_after_s is not None:
            delay = max(delay, min(result.retry_after_s, self.backoff_max_s))
        self.retry_at = self._clock() + delay
        logger.warning(
            "telemetry agent: posting %d buffered samples failed (%s); retry %d in %.1f s",
            len(self.buffer), result.detail, self.consecutive_failures, delay,
        )

    def _post(self, batch: list[dict[str, Any]]) -> _PostResult:
        body = json.dumps({"node": self.node_name, "samples": batch}).encode()
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            if exc.code in _RETRYABLE_STATUS:
                return _PostResult("retry", exc.code, f"HTTP {exc.code}", retry_after_s=_retry_after(exc.headers))
            return _PostResult("drop", exc.code, detail)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            # Connection refused, reset, DNS, timeouts, and a connection closed before the
            # answer (the server may have stored the batch: the re-send is a duplicate, ignored).
            return _PostResult("retry", None, str(getattr(exc, "reason", exc)) or type(exc).__name__)
        try:
            parsed = json.loads(answer) if answer else {}
        except ValueError:
            parsed = {}
        return _PostResult("ok", status, body=parsed if isinstance(parsed, dict) else {})


def _retry_after(headers: Any) -> float | None:
    """Retry-After in seconds (the delta form; the HTTP-date form is ignored)."""
    raw = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


__all__ = ["AgentStats", "TelemetryAgent", "sample_payload"]
