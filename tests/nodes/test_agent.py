"""The node agent: buffering while the server is away, exactly-once delivery, backoff, batch refusal.

Two servers:
- `TelemetrySink`, a small real HTTP server in a thread that stores samples under the same unique
  (gpu_uuid, ts) key as GPUSample and can be stopped and restarted on its port, or made to store a
  batch and then lose the answer;
- the real gpuplane API (`live_server`) with a real agent token, for the contract end to end.
Time is driven by a fake clock: the agent's sleep advances it, so minutes pass in milliseconds.
"""
from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from nodes.agent import TelemetryAgent
from nodes.collectors.base import CollectorUnavailable, GPUReading, empty_reading
from nodes.models import GPUSample, NodeAgentToken
from tests.nodes.factories import make_node

TOKEN = "agent-key-for-gpu-node-1"
NODE = "gpu-node-1"
START = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


class TelemetrySink:
    """A stand-in telemetry endpoint with GPUSample's unique (gpu_uuid, ts) semantics.

    `mode`: "ok" (201 {"stored", "duplicates"}), "lose-answer" (store the batch, then close the
    connection without answering, once), or an HTTP status to answer without storing.
    """

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.posts: list[list[dict[str, Any]]] = []  # every batch received, stored or not
        self.mode: str | int = "ok"
        self.headers: dict[str, str] = {}
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/api/v1/telemetry/" or self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._answer(401, {"detail": "Invalid agent token."})
                    return
                samples = body["samples"]
                sink.posts.append(samples)
                sink.headers = dict(self.headers)
                if isinstance(sink.mode, int):
                    headers = {"Retry-After": "120"} if sink.mode == 429 else {}
                    self._answer(sink.mode, {"samples": ["refused by the test"]}, headers)
                    return
                new = 0
                for sample in samples:
                    key = (sample["gpu_uuid"], sample["ts"])
                    if key not in sink.stored:
                        sink.stored[key] = sample
                        new += 1
                if sink.mode == "lose-answer":
                    sink.mode = "ok"
                    self.close_connection = True
                    self.connection.close()  # stored, but the agent never hears of it
                    return
                self._answer(201, {"stored": new, "duplicates": len(samples) - new})

            def _answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        # The same port after a restart, as a restarted Service would be (SO_REUSEADDR is on).
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()  # connections are refused from now on
        self.server = None

    @property
    def running(self) -> bool:
        return self.server is not None


@pytest.fixture
def sink() -> Iterator[TelemetrySink]:
    server = TelemetrySink()
    yield server
    if server.running:
        server.stop()


class FakeTime:
    """Monotonic clock + sleep for the agent; `on_sleep` hooks let a test act at given times."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.hooks: list[tuple[float, Callable[[], None]]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for when, action in list(self.hooks):
            if self.now >= when:
                self.hooks.remove((when, action))
                action()

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.hooks.append((when, action))


class FakeCollector:
    """Two GPUs whose readings are stamped with the fake clock's wall time (START + elapsed)."""

    name = "nvml"

    def __init__(self, fake_time: FakeTime, gpus: tuple[str, ...] = ("GPU-0", "GPU-1")) -> None:
        self.time = fake_time
        self.gpus = gpus
        self.fail = False

    def collect(self) -> list[GPUReading]:
        if self.fail:
            raise CollectorUnavailable("NVML could not be initialised (Driver Not Loaded)")
        ts = START + timedelta(seconds=round(self.time.now))
        return [
            GPUReading(gpu_uuid=uuid, index=i, ts=ts, utilization_pct=float(i * 10), memory_used_mib=1024,
                       memory_total_mib=81559, power_w=100.0, power_limit_w=700.0, temperature_c=40.0,
                       sm_clock_mhz=None, mig_enabled=False, missing=frozenset({"sm_clock_mhz"}))
            for i, uuid in enumerate(self.gpus)
        ]


def make_agent(url: str, fake_time: FakeTime, collector: Any = None, **options: Any) -> TelemetryAgent:
    return TelemetryAgent(
        url, TOKEN, NODE, collector or FakeCollector(fake_time),
        sleep=fake_time.sleep, clock=fake_time.clock, rng=random.Random(4), **options,
    )


def test_every_sample_buffered_while_the_server_was_down_is_delivered_exactly_once(sink):
    fake_time = FakeTime()
    # Backoff capped at 60 s: the agent notices within a minute that the server is back.
    agent = make_agent(sink.url, fake_time, interval_s=30, batch_size=3, max_buffer_samples=1000, backoff_max_s=60)
    down_at, up_at = 45.0, 400.0
    fake_time.at(down_at, sink.stop)
    fake_time.at(up_at, sink.start)

    agent.run(max_ticks=20)  # 20 readings over 570 s; the server is away for about 6 minutes

    ticks = [START + timedelta(seconds=30 * i) for i in range(20)]
    expected = {(gpu, ts.isoformat()) for ts in ticks for gpu in ("GPU-0", "GPU-1")}
    assert set(sink.stored) == expected  # no gaps
    received = [(s["gpu_uuid"], s["ts"]) for batch in sink.posts for s in batch]
    assert sorted(received) == sorted(expected)  # each sent exactly once (none was lost in flight)
    assert len(agent.buffer) == 0
    stats = agent.stats_dict()
    assert stats["collected"] == stats["delivered"] == 40
    assert stats["dropped_overflow"] == stats["dropped_rejected"] == stats["duplicates"] == 0
    assert stats["failed_posts"] >= 3  # it did try while the server was down
    # Batches of at most 3, oldest first.
    assert max(len(batch) for batch in sink.posts) == 3
    assert received == sorted(received, key=lambda key: key[1])
    assert sink.headers["Content-Type"] == "application/json"


def test_retries_back_off_exponentially_with_jitter(sink):
    sink.stop()
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time, interval_s=1000, backoff_base_s=2, backoff_max_s=60)
    agent.collect_once()

    delays = []
    for _ in range(7):
        before = fake_time.now
        assert agent.flush() is False
        delays.append(agent.retry_at - before)
        fake_time.now = agent.retry_at

    for attempt, delay in enumerate(delays):
        ceiling = min(60, 2 * 2**attempt)  # 2, 4, 8, 16, 32, 60, 60
        assert ceiling * 0.5 <= delay <= ceiling, (attempt, delay)
    assert len(set(delays[-2:])) == 2  # jitter: two capped delays still differ
    assert agent.consecutive_failures == 7 and len(agent.buffer) == 2

    sink.start()
    assert agent.flush() is True
    assert agent.consecutive_failures == 0 and len(sink.stored) == 2


def test_a_batch_resent_after_a_lost_answer_is_stored_once(sink):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time)
    sink.mode = "lose-answer"
    agent.collect_once()

    assert agent.flush() is False  # the server stored it, but the agent cannot know
    assert len(sink.stored) == 2 and len(agent.buffer) == 2

    fake_time.now = agent.retry_at
    assert agent.flush() is True

    assert len(sink.posts) == 2 and sink.posts[0] == sink.posts[1]  # the same batch, sent twice
    assert len(sink.stored) == 2  # stored once: the unique key turned the repeat into duplicates
    assert agent.stats.duplicates == 2 and agent.stats.delivered == 2


def test_a_full_buffer_drops_the_oldest_samples_and_says_so(sink, caplog):
    sink.stop()
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time, max_buffer_samples=5)

    for tick in range(4):  # 8 samples for a buffer of 5
        fake_time.now = 30.0 * tick
        agent.collect_once()

    assert agent.stats.dropped_overflow == 3
    assert "buffer full" in caplog.text and "dropped the 1 oldest" in caplog.text
    sink.start()
    fake_time.now = agent.retry_at + 1
    assert agent.flush() is True
    # What is left is the newest five: GPU-1 of tick 1, then ticks 2 and 3.
    assert sorted(sink.stored) == sorted(
        [("GPU-1", (START + timedelta(seconds=30)).isoformat())]
        + [(gpu, (START + timedelta(seconds=30 * t)).isoformat()) for t in (2, 3) for gpu in ("GPU-0", "GPU-1")]
    )


@pytest.mark.parametrize(("status", "outcome"), [(400, "dropped"), (403, "dropped"), (429, "kept"), (500, "kept"), (503, "kept")])
def test_a_refused_batch_is_dropped_and_a_server_error_retried(sink, status, outcome, caplog):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time)
    sink.mode = status
    agent.collect_once()

    flushed = agent.flush()

    if outcome == "dropped":
        assert flushed is True and len(agent.buffer) == 0
        assert agent.stats.dropped_rejected == 2
        assert f"HTTP {status}" in caplog.text and "refused by the test" in caplog.text
        assert agent.flush() is True and len(sink.posts) == 1  # never sent again
    else:
        assert flushed is False and len(agent.buffer) == 2
        assert agent.retry_at > fake_time.now
        if status == 429:
            assert agent.retry_at - fake_time.now >= 120  # Retry-After honoured
        sink.mode = "ok"
        fake_time.now = agent.retry_at
        assert agent.flush() is True and len(sink.stored) == 2


def test_a_gpu_reading_without_metrics_is_not_sent_and_a_driver_outage_does_not_stop_the_agent(sink, caplog):
    fake_time = FakeTime()

    class Collector(FakeCollector):
        def collect(self) -> list[GPUReading]:
            readings = super().collect()
            return [readings[0], empty_reading("GPU-lost", 1, readings[0].ts)]

    collector = Collector(fake_time)
    agent = make_agent(sink.url, fake_time, collector=collector)

    assert agent.collect_once() == 1
    collector.fail = True
    assert agent.collect_once() == 0
    assert "Driver Not Loaded" in caplog.text
    agent.flush()

    assert [key[0] for key in sink.stored] == ["GPU-0"]
    sample = next(iter(sink.stored.values()))
    assert sample == {
        "gpu_uuid": "GPU-0", "ts": "2025-03-01T12:00:00+00:00", "utilization_pct": 0.0, "memory_used_mib": 1024,
        "memory_total_mib": 81559, "power_w": 100.0, "temperature_c": 40.0, "sm_clock_mhz": None,
    }


# --- against the real API ----------------------------------------------------------------------


@pytest.fixture
def agent_node(transactional_db):
    from nodes.authentication import issue_agent_token

    node = make_node(NODE, gpu_count=2)
    _, key = issue_agent_token(node)
    return node, key


def api_collector(fake_time: FakeTime, node_name: str = NODE) -> FakeCollector:
    collector = FakeCollector(fake_time, gpus=(f"GPU-{node_name}-0", f"GPU-{node_name}-1"))
    return collector


def test_it_delivers_to_the_real_api_and_a_resent_batch_stores_nothing_twice(live_server, agent_node):
    node, key = agent_node
    fake_time = FakeTime()
    # Stamped now, not in 2025: the API refuses samples older than the rollup retention.
    now = datetime.now(UTC).replace(microsecond=0)
    collector = api_collector(fake_time)
    collector.collect = lambda: [  # type: ignore[method-assign]
        GPUReading(gpu_uuid=f"GPU-{NODE}-{i}", index=i, ts=now - timedelta(seconds=30), utilization_pct=42.0,
                   memory_used_mib=2048, memory_total_mib=81920, power_w=250.5, power_limit_w=700.0,
                   temperature_c=55.0, sm_clock_mhz=1980, mig_enabled=False)
        for i in range(2)
    ]
    agent = TelemetryAgent(live_server.url, key, NODE, collector, sleep=fake_time.sleep, clock=fake_time.clock)

    agent.collect_once()
    assert agent.flush() is True
    agent.collect_once()  # the same readings again, as after a lost answer
    assert agent.flush() is True

    assert agent.stats.delivered == 4 and agent.stats.duplicates == 2
    rows = list(GPUSample.objects.order_by("gpu__index").values_list("gpu__uuid", "utilization_pct", "sm_clock_mhz", "source"))
    assert rows == [(f"GPU-{NODE}-0", 42.0, 1980, "agent"), (f"GPU-{NODE}-1", 42.0, 1980, "agent")]
    assert NodeAgentToken.objects.get(node=node).last_used_at is not None


def test_a_token_of_another_node_gets_its_batches_dropped_not_retried(live_server, agent_node, caplog):
    _, key = agent_node
    make_node("gpu-node-2", gpu_count=1)
    fake_time = FakeTime()
    agent = TelemetryAgent(live_server.url, key, "gpu-node-2", api_collector(fake_time, "gpu-node-2"),
                           sleep=fake_time.sleep, clock=fake_time.clock)

    agent.collect_once()

    assert agent.flush() is True
    assert agent.stats.dropped_rejected == 2 and "HTTP 403" in caplog.text
    assert not GPUSample.objects.exists()


def test_the_command_reads_nvml_once_and_posts(live_server, agent_node, monkeypatch, capsys):
    from tests.nodes.test_collector_nvml import FakeGPU, FakeNVML

    _, key = agent_node
    fake = FakeNVML([
        FakeGPU(uuid=f"GPU-{NODE}-0", index=0, utilization=61, memory_used_mib=4096),
        FakeGPU(uuid=f"GPU-{NODE}-1", index=1, utilization=7, power_mw=None),
    ]).install(monkeypatch)

    # --token=KEY: a urlsafe key may start with "-", which argparse would take for an option.
    call_command("gpuplane_agent", "--server", live_server.url, f"--token={key}", "--node", NODE, "--once")

    assert "Posted 2 sample(s) for node gpu-node-1" in capsys.readouterr().out
    rows = dict(GPUSample.objects.values_list("gpu__uuid", "utilization_pct"))
    assert rows == {f"GPU-{NODE}-0": 61.0, f"GPU-{NODE}-1": 7.0}
    assert GPUSample.objects.get(gpu__uuid=f"GPU-{NODE}-1").power_w is None
    assert fake.calls["nvmlInit"] == 1 and fake.initialised == 0  # one session, shut down on exit


def test_the_command_fails_clearly_without_a_token_or_without_nvml(monkeypatch):
    import pynvml

    from tests.nodes.test_collector_nvml import FakeNVML

    monkeypatch.delenv("GPUPLANE_AGENT_TOKEN", raising=False)
    with pytest.raises(CommandError, match="agent token is required"):
        call_command("gpuplane_agent", "--server", "http://127.0.0.1:9", "--token", "")

    FakeNVML([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED).install(monkeypatch)
    with pytest.raises(CommandError, match="NVML could not be initialised"):
        call_command("gpuplane_agent", "--server", "http://127.0.0.1:9", "--token", "k", "--once")


def test_the_command_with_once_fails_when_nothing_could_be_delivered(monkeypatch, sink):
    from tests.nodes.test_collector_nvml import FakeGPU, FakeNVML

    FakeNVML([FakeGPU(uuid="GPU-0", index=0)]).install(monkeypatch)
    sink.stop()
    monkeypatch.setattr("nodes.agent.DEFAULT_BACKOFF_BASE_S", 0.01)  # keep the three tries short

    with pytest.raises(CommandError, match="not delivered"):
        call_command("gpuplane_agent", "--server", sink.url, "--token", TOKEN, "--node", NODE, "--once")


def test_stop_wakes_a_sleeping_agent_at_once_and_a_forced_flush_ignores_the_backoff(sink):
    import time

    fake_time = FakeTime()
    agent = TelemetryAgent(sink.url, TOKEN, NODE, FakeCollector(fake_time), interval_s=3600)  # real sleep
    runner = threading.Thread(target=agent.run)
    runner.start()
    time.sleep(0.3)  # it collected, delivered, and now waits an hour for the next reading

    started = time.monotonic()
    agent.stop()  # what the command's SIGTERM handler calls
    runner.join(timeout=5)

    assert not runner.is_alive() and time.monotonic() - started < 1
    assert len(sink.stored) == 2

    sink.stop()
    fake_time.now = 30.0  # the next reading's timestamp
    agent.collect_once()
    assert agent.flush() is False and agent.retry_at > time.monotonic()
    sink.start()
    assert agent.flush() is False  # still backing off (at least 0.5 s) ...
    assert agent.flush(force=True) is True  # ... but the last attempt before exiting goes out anyway
    assert len(sink.stored) == 4
