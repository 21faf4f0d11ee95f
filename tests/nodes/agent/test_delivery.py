"""The node agent: buffering while the server is away, exactly-once delivery, backoff, batch
refusal, stopping.

The server is `TelemetrySink` (tests/nodes/agent/fakes.py), which can be stopped, restarted, or
made to lose an answer.
Time is driven by a fake clock: the agent's sleep advances it, so minutes pass in milliseconds.
"""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from nodes.agent import TelemetryAgent
from nodes.collectors.base import GPUReading, empty_reading
from tests.nodes.agent.fakes import NODE, START, TOKEN, FakeCollector, FakeTime, make_agent


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
        "memory_total_mib": 81559, "memory_reserved_mib": None, "power_w": 100.0, "power_limit_w": 700.0,
        "temperature_c": 40.0, "sm_clock_mhz": None, "processes": [],
    }



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
