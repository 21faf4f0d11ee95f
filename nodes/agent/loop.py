"""TelemetryAgent: the node agent loop behind `manage.py gpuplane_agent` (one per GPU node, a DaemonSet).

Every `interval_s` it reads the node's GPUs (NVML), reports them to the server when that is due
(`nodes.agent.report`: before the first telemetry, whenever what it reads changes, and when the
server does not know a GPU), appends the samples to a bounded in-memory buffer and posts the
buffer to the server in batches (`POST {server}/api/v1/telemetry/`, `Authorization: Bearer
<agent token>`, body `{"node": NAME, "samples": [...]}`). The token is a node agent key, or its
projected ServiceAccount token's file, read again for every post (`nodes.agent.http.TokenFile`).

Delivery rules, which together give "every good sample exactly once" while the buffer does not
overflow:

- A sample leaves the buffer only after the server answered for its batch. A lost answer
  (connection reset after the server stored the batch) makes the agent send the batch again;
  the server's unique (GPU, ts) key turns the repeat into `duplicates`, so nothing is stored twice.
- Connection failures, timeouts, 5xx and 429 are retried with exponential backoff and jitter
  (`backoff_base_s` x 2^(failures-1), capped at `backoff_max_s`, times a random factor in
  [0.5, 1] so that a fleet of agents does not hammer a server that just came back in lockstep;
  a 429/503 Retry-After is honoured). Collection goes on meanwhile.
- The server answers per sample (207, or 400 when it refused every one): the samples it took
  leave the buffer; those it refused because it does not know their GPU yet (listed in `retry`:
  a fresh node whose report is still being bound) wait `interval_s` and are sent again, for at
  most `unknown_gpu_patience_s`, and the agent reports its GPUs again; the others it refused for
  good (out of range, a clock far off) are dropped and logged with the server's reasons. One bad
  sample never costs the good ones beside it.
- Any other 4xx refuses the batch itself (a malformed batch, a revoked token, another node's
  name): the batch is dropped and logged; it would be refused forever.
- Buffer and waiting samples together hold at most `max_buffer_samples`; when full, the oldest
  are dropped, counted in `stats.dropped_overflow` and logged, so a long outage costs the
  oldest data, never the agent's memory.

No Django model is imported: the agent runs on GPU nodes without a database.
"""
from __future__ import annotations

import logging
import random
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any

from nodes.agent.http import Credential, PostResult, post_json
from nodes.agent.report import gpu_report
from nodes.collectors.base import Collector, CollectorUnavailable, GPUReading

logger = logging.getLogger(__name__)

TELEMETRY_PATH = "/api/v1/telemetry/"
REPORT_PATH = "/api/v1/nodes/{node}/gpu-report/"
DEFAULT_INTERVAL_S = 30.0
# 10,000 samples: about 20 minutes of an 8-GPU node at 30 s, a few MB of memory.
DEFAULT_MAX_BUFFER_SAMPLES = 10_000
DEFAULT_BATCH_SIZE = 500
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_BACKOFF_BASE_S = 1.0
DEFAULT_BACKOFF_MAX_S = 300.0
# The report is sent again this often even when nothing changed (the server may have lost it).
DEFAULT_REPORT_INTERVAL_S = 600.0
# How long samples of a GPU the server does not know yet are kept and sent again.
DEFAULT_UNKNOWN_GPU_PATIENCE_S = 900.0


@dataclass
class AgentStats:
    """Counters since the agent started."""

    collected: int = 0  # samples appended to the buffer
    delivered: int = 0  # samples the server took (stored, or already had)
    duplicates: int = 0  # of those, samples the server already had (re-sends)
    dropped_overflow: int = 0  # oldest samples pushed out of a full buffer
    dropped_rejected: int = 0  # samples the server refused for good (or in a batch it refused whole)
    dropped_unknown_gpu: int = 0  # samples of a GPU the server still did not know after the patience
    failed_posts: int = 0  # posts that will be retried (connection errors, 5xx, 429)
    reports: int = 0  # GPU reports the server took


def sample_payload(reading: GPUReading) -> dict[str, Any]:
    """One reading as the API's sample object; metrics that were not measured are null."""
    processes = reading.reported_processes
    return {
        "gpu_uuid": reading.gpu_uuid,
        "ts": reading.ts.isoformat(),
        **reading.sample_values(),
        "processes": None if processes is None else [{"pid": pid, "used_memory_mib": used} for pid, used in processes],
    }


class TelemetryAgent:
    """Collect, report, buffer and post one node's GPU samples; see the module docstring.

    `sleep` (default: an interruptible wait) and `clock` (monotonic seconds) are injectable so
    that tests drive time; `rng` makes the jitter reproducible. `run()` loops until `stop()`;
    `collect_once()` and `flush()` are its two steps, and `run_once()` is `--once`.
    """

    def __init__(
        self,
        server_url: str,
        token: Credential,
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
        report_interval_s: float = DEFAULT_REPORT_INTERVAL_S,
        unknown_gpu_patience_s: float = DEFAULT_UNKNOWN_GPU_PATIENCE_S,
    ) -> None:
        if interval_s <= 0 or max_buffer_samples < 1 or batch_size < 1:
            raise ValueError("interval_s must be > 0, max_buffer_samples and batch_size >= 1")
        base = server_url.rstrip("/")
        self.url = base + TELEMETRY_PATH
        self.report_url = base + REPORT_PATH.format(node=urllib.parse.quote(node_name, safe=""))
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
        self.report_interval_s = report_interval_s
        self.unknown_gpu_patience_s = unknown_gpu_patience_s
        # The default sleep wakes up early when stop() is called (SIGTERM must not wait an interval).
        self._wake = threading.Event()
        self._sleep = sleep or self._wake.wait
        self._clock = clock
        self._rng = rng or random.Random()
        self.buffer: deque[dict[str, Any]] = deque()
        # Samples of GPUs the server did not know yet: (send again at, give up at, sample).
        self.waiting: deque[tuple[float, float, dict[str, Any]]] = deque()
        self._first_refused: dict[tuple[Any, Any], float] = {}  # (gpu_uuid, ts) -> when first refused so
        self.stats = AgentStats()
        self.consecutive_failures = 0
        self.retry_at = 0.0  # clock() before which no post is attempted (backoff)
        self.reported: list[dict[str, Any]] | None = None  # the last GPU report the server took
        self.reported_at = float("-inf")
        self.report_wanted = True  # the server may not know our GPUs: report at the next reading
        self._stopped = False

    # --- the two steps ------------------------------------------------------------------------
    def collect_once(self) -> int:
        """Read the GPUs, report them if due, and buffer one sample per GPU that reported a metric.

        Returns how many samples were buffered. A collector that cannot read at all (driver
        restarting) is logged and yields nothing: the agent keeps running and tries again next
        interval.
        """
        try:
            readings = self.collector.collect()
        except CollectorUnavailable as exc:
            logger.error("telemetry agent: cannot read the GPUs: %s", exc)
            return 0
        self.report(readings)
        samples = [sample_payload(reading) for reading in readings if reading.has_metrics]
        self.buffer.extend(samples)
        self._trim()
        self.stats.collected += len(samples)
        return len(samples)

    def report(self, readings: list[GPUReading], *, force: bool = False) -> bool:
        """Post the node's GPU report when due (or `force`); True when the server has a current one."""
        if not readings:
            return False
        payload = gpu_report(readings)
        due = force or self.report_wanted or payload != self.reported
        if not due and self._clock() - self.reported_at < self.report_interval_s:
            return True
        result = post_json(self.report_url, self.token, {"gpus": payload}, self.timeout_s)
        if result.outcome == "ok":
            self.reported, self.reported_at, self.report_wanted = payload, self._clock(), False
            self.stats.reports += 1
            body = result.body or {}
            if body.get("bound") or body.get("conflicts") or body.get("unknown_indexes"):
                logger.info("telemetry agent: GPU report taken: bound %s, not yet in the inventory %s, "
                            "bound to another node %s", body.get("bound"), body.get("unknown_indexes"),
                            body.get("conflicts"))
            return True
        # Refused (an unknown node, a token of another node) or the server is away: the samples
        # are still sent (the server may know the GPUs from an earlier report), and the report
        # is tried again at the next reading.
        logger.warning("telemetry agent: GPU report not taken (%s %s): %s", result.outcome,
                       result.status or "", result.detail)
        self.report_wanted = True
        return False

    def flush(self, *, force: bool = False) -> bool:
        """Post buffered samples in batches, oldest first, unless backing off; True when the buffer is empty.

        Samples waiting for their GPU to be known are put back first once their time has come.
        Stops at the first batch that must be retried and schedules the retry (`retry_at`).
        `force` tries once even while backing off (the last attempt before the agent exits).
        """
        self._release_waiting(force=force)
        while self.buffer:
            if not force and self._clock() < self.retry_at:
                return False
            batch = list(islice(self.buffer, 0, self.batch_size))
            result = post_json(self.url, self.token, {"node": self.node_name, "samples": batch}, self.timeout_s)
            if result.outcome == "retry":
                self._back_off(result)
                return False
            for _ in batch:
                self.buffer.popleft()
            self.consecutive_failures = 0
            self.retry_at = 0.0
            self._settle(batch, result)
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
            if self.waiting:
                wake = min(wake, self.waiting[0][0])
            self._sleep(max(0.0, wake - self._clock()))

    def run_once(self, *, attempts: int = 3) -> bool:
        """`--once`: collect one round and try to deliver it, backing off up to `attempts` posts.

        Samples of GPUs the server did not know are sent once more right after a fresh report
        (there is no later for them). Returns True when nothing is left to send: everything was
        taken (or refused by the server for good and dropped).
        """
        self.collect_once()
        for attempt in range(attempts):
            if self.flush() and not self.waiting:
                return True
            if self.waiting and not self.buffer:
                readings = self._read_quietly()
                self.report(readings, force=True)
                if self.flush(force=True) and not self.waiting:
                    return True
            if attempt < attempts - 1:
                self._sleep(max(0.0, self.retry_at - self._clock()))
        return False

    def stop(self) -> None:
        """Ask `run()` to return after its current step (signal handlers call this)."""
        self._stopped = True
        self._wake.set()

    def stats_dict(self) -> dict[str, int]:
        return {**asdict(self.stats), "buffered": len(self.buffer), "waiting": len(self.waiting)}

    # --- answers --------------------------------------------------------------------------------
    def _settle(self, batch: list[dict[str, Any]], result: PostResult) -> None:
        """Account for a batch the server answered (not "retry"): taken, waiting or dropped per sample."""
        body = result.body or {}
        refused = body.get("samples")
        per_sample = isinstance(refused, dict) and "stored" in body
        if result.outcome == "refused" and not per_sample:
            self.stats.dropped_rejected += len(batch)
            logger.error("telemetry agent: server refused a batch of %d samples (HTTP %s), dropped: %s",
                         len(batch), result.status, result.detail)
            return
        refused = refused if per_sample and isinstance(refused, dict) else {}
        self.stats.duplicates += int(body.get("duplicates", 0) or 0)
        retry = {int(index) for index in body.get("retry", ()) if isinstance(index, int)}
        now = self._clock()
        for index, sample in enumerate(batch):
            reasons = refused.get(str(index))
            key = (sample.get("gpu_uuid"), sample.get("ts"))
            if reasons is None:
                self.stats.delivered += 1
                self._first_refused.pop(key, None)
            elif index in retry:
                first = self._first_refused.setdefault(key, now)
                self.waiting.append((now + self.interval_s, first + self.unknown_gpu_patience_s, sample))
            else:
                self._first_refused.pop(key, None)
                self.stats.dropped_rejected += 1
                logger.error("telemetry agent: server refused sample %s of GPU %s for good, dropped: %s",
                             sample.get("ts"), sample.get("gpu_uuid"), reasons)
        if retry:
            self.report_wanted = True  # it does not know a GPU of ours: tell it again
            logger.warning("telemetry agent: the server does not know %d sample(s)' GPU yet; they are sent "
                           "again in %.0f s (reporting the GPUs again)", len(retry), self.interval_s)

    def _release_waiting(self, *, force: bool) -> None:
        """Put back into the buffer the waiting samples whose time has come; drop those past the patience."""
        now = self._clock()
        kept: deque[tuple[float, float, dict[str, Any]]] = deque()
        released = []
        for ready_at, give_up_at, sample in self.waiting:
            if now >= give_up_at:
                self._first_refused.pop((sample.get("gpu_uuid"), sample.get("ts")), None)
                self.stats.dropped_unknown_gpu += 1
                logger.error("telemetry agent: the server still does not know GPU %s after %.0f s; sample %s dropped",
                             sample.get("gpu_uuid"), self.unknown_gpu_patience_s, sample.get("ts"))
            elif force or now >= ready_at:
                released.append(sample)
            else:
                kept.append((ready_at, give_up_at, sample))
        self.waiting = kept
        self.buffer.extendleft(reversed(released))  # oldest first

    def _read_quietly(self) -> list[GPUReading]:
        try:
            return self.collector.collect()
        except CollectorUnavailable:
            return []

    def _trim(self) -> None:
        overflow = max(0, len(self.buffer) + len(self.waiting) - self.max_buffer_samples)
        for _ in range(overflow):
            sample = self.waiting.popleft()[2] if self.waiting else self.buffer.popleft()
            self._first_refused.pop((sample.get("gpu_uuid"), sample.get("ts")), None)
        if overflow:
            self.stats.dropped_overflow += overflow
            logger.warning(
                "telemetry agent: buffer full (%d samples): dropped the %d oldest (%d dropped so far); server unreachable?",
                self.max_buffer_samples, overflow, self.stats.dropped_overflow,
            )

    def _back_off(self, result: PostResult) -> None:
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
