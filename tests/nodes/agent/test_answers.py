"""The node agent and the server's per-sample answers, and its GPU reports.

A 207 (or a 400 refusing every sample) names each refused sample: the agent keeps the good ones
delivered, drops what the server refused for good (logging why), and sends again, for a while,
what it refused only because it did not know the GPU yet, reporting its GPUs again meanwhile.
"""
from __future__ import annotations

from typing import Any

from tests.nodes.agent.fakes import NODE, FakeCollector, FakeTime, make_agent


def out_of_range(sample: dict[str, Any]) -> tuple[dict[str, list[str]], bool] | None:
    if sample["gpu_uuid"] == "GPU-1":
        return {"power_w": ["must be at most 1050, 1.5 × the 700 W TDP; got 5000.0"]}, False
    return None


def test_a_refused_sample_is_dropped_and_logged_and_its_neighbours_delivered(sink, caplog):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time, batch_size=96)
    sink.refuse = out_of_range

    agent.collect_once()
    assert agent.flush() is True

    assert [gpu for gpu, _ in sink.stored] == ["GPU-0"]
    stats = agent.stats_dict()
    assert (stats["delivered"], stats["dropped_rejected"], stats["waiting"], stats["buffered"]) == (1, 1, 0, 0)
    assert "refused sample" in caplog.text and "GPU-1" in caplog.text and "5000.0" in caplog.text
    assert len(sink.posts) == 1  # not sent again: the server said no for good


def test_samples_of_a_gpu_the_server_does_not_know_yet_are_sent_again_after_a_fresh_report(sink):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time, interval_s=30)
    known: set[str] = {"GPU-0"}
    sink.refuse = lambda s: None if s["gpu_uuid"] in known else ({"gpu_uuid": [f"Unknown GPU {s['gpu_uuid']!r}."]}, True)

    agent.collect_once()  # reports first, then buffers two samples
    assert agent.flush() is True  # buffer empty; GPU-1's sample waits
    assert (len(agent.waiting), agent.stats.delivered, agent.report_wanted) == (1, 1, True)

    known.add("GPU-1")  # the server bound the report meanwhile
    fake_time.now = 30.0
    agent.collect_once()  # the due report goes out, then the new readings
    assert agent.flush() is True

    assert len(sink.stored) == 4 and not agent.waiting  # nothing lost
    assert agent.stats.delivered == 4 and agent.stats.dropped_rejected == 0
    assert len(sink.reports) == 2  # at start, and again after the server did not know a GPU
    assert sink.paths[0] == f"/api/v1/nodes/{NODE}/gpu-report/"  # before any telemetry


def test_samples_of_a_gpu_never_known_are_given_up_after_the_patience(sink, caplog):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time, interval_s=30, unknown_gpu_patience_s=120)
    sink.refuse = lambda s: ({"gpu_uuid": ["Unknown GPU."]}, True) if s["gpu_uuid"] == "GPU-1" else None

    agent.run(max_ticks=8)  # 210 s

    stats = agent.stats_dict()
    assert stats["delivered"] == 8  # every GPU-0 sample
    assert stats["dropped_unknown_gpu"] >= 3 and stats["waiting"] <= 4
    assert stats["dropped_unknown_gpu"] + stats["waiting"] + stats["buffered"] == 8
    assert "still does not know GPU GPU-1" in caplog.text


def test_a_400_refusing_every_sample_one_by_one_is_settled_per_sample(sink):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time)
    sink.refuse = lambda s: ({"ts": ["is 600 s in the future"]}, False)

    agent.collect_once()

    assert agent.flush() is True
    assert agent.stats.dropped_rejected == 2 and agent.stats.delivered == 0 and not agent.buffer


def test_the_report_goes_out_again_only_when_what_nvml_says_changes_or_it_is_old(sink):
    fake_time = FakeTime()
    collector = FakeCollector(fake_time)
    agent = make_agent(sink.url, fake_time, collector=collector, report_interval_s=600)

    agent.collect_once()
    fake_time.now = 30
    agent.collect_once()
    assert len(sink.reports) == 1
    assert sink.reports[0] == [
        {"index": 0, "uuid": "GPU-0", "product": "", "memory_total_mib": 81559, "mig_enabled": False, "mig_instances": []},
        {"index": 1, "uuid": "GPU-1", "product": "", "memory_total_mib": 81559, "mig_enabled": False, "mig_instances": []},
    ]

    collector.gpus = ("GPU-0", "GPU-9")  # a board replaced (or MIG reconfigured): a new report at once
    fake_time.now = 60
    agent.collect_once()
    assert len(sink.reports) == 2 and sink.reports[1][1]["uuid"] == "GPU-9"

    fake_time.now = 700  # nothing changed, but the last report is 10 minutes old
    agent.collect_once()
    assert len(sink.reports) == 3


def test_a_report_the_server_cannot_take_now_does_not_hold_the_samples_back(sink):
    fake_time = FakeTime()
    agent = make_agent(sink.url, fake_time)
    sink.reports_status = 503

    agent.collect_once()
    assert agent.flush() is True
    assert len(sink.stored) == 2 and agent.report_wanted  # tried again at the next reading
