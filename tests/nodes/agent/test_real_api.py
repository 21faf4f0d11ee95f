"""The node agent against the real gpuplane API (`live_server`) with a real agent token, and the
`gpuplane_agent` command.

Time is driven by a fake clock: the agent's sleep advances it, so minutes pass in milliseconds.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from nodes.agent import TelemetryAgent
from nodes.collectors.base import GPUReading
from nodes.models import GPUSample, NodeAgentToken
from tests.nodes.agent.fakes import NODE, TOKEN, FakeCollector, FakeTime
from tests.nodes.factories import make_node

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
    from tests.nodes.fake_nvml import FakeGPU, FakeNVML

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

    from tests.nodes.fake_nvml import FakeNVML

    monkeypatch.delenv("GPUPLANE_AGENT_TOKEN", raising=False)
    monkeypatch.delenv("GPUPLANE_AGENT_TOKEN_FILE", raising=False)
    with pytest.raises(CommandError, match="agent credential is required"):
        call_command("gpuplane_agent", "--server", "http://127.0.0.1:9", "--token", "")
    with pytest.raises(CommandError, match="cannot read the agent's token file"):
        call_command("gpuplane_agent", "--server", "http://127.0.0.1:9", "--token-file", "/nonexistent/token")

    FakeNVML([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED).install(monkeypatch)
    with pytest.raises(CommandError, match="NVML could not be initialised"):
        call_command("gpuplane_agent", "--server", "http://127.0.0.1:9", "--token", "k", "--once")


def test_the_command_with_once_fails_when_nothing_could_be_delivered(monkeypatch, sink):
    from tests.nodes.fake_nvml import FakeGPU, FakeNVML

    FakeNVML([FakeGPU(uuid="GPU-0", index=0)]).install(monkeypatch)
    sink.stop()
    monkeypatch.setattr("nodes.agent.loop.DEFAULT_BACKOFF_BASE_S", 0.01)  # keep the three tries short

    with pytest.raises(CommandError, match="not delivered"):
        call_command("gpuplane_agent", "--server", sink.url, "--token", TOKEN, "--node", NODE, "--once")
