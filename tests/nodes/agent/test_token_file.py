"""The agent's projected ServiceAccount token: read again for every post, since the kubelet
rewrites the file before the token expires; a file that cannot be read delays, never drops."""
from __future__ import annotations

from nodes.agent import TelemetryAgent, TokenFile
from tests.nodes.agent.fakes import NODE, TOKEN, FakeCollector, FakeTime


def test_every_post_carries_the_token_the_file_holds_now(sink, tmp_path):
    fake_time = FakeTime()
    token_file = tmp_path / "token"
    token_file.write_text("expired-token\n")
    agent = TelemetryAgent(sink.url, TokenFile(token_file), NODE, FakeCollector(fake_time),
                           sleep=fake_time.sleep, clock=fake_time.clock)

    agent.collect_once()
    assert agent.flush() is True
    assert agent.stats.dropped_rejected == 2 and sink.stored == {}  # the sink takes only TOKEN: 401

    token_file.write_text(f"{TOKEN}\n")  # the kubelet rotated it
    fake_time.now += 30
    agent.collect_once()
    assert agent.flush() is True

    assert len(sink.stored) == 2 and agent.stats.delivered == 2
    assert sink.headers["Authorization"] == f"Bearer {TOKEN}"


def test_a_token_file_that_cannot_be_read_is_a_retry_not_a_refusal(sink, tmp_path):
    fake_time = FakeTime()
    token_file = tmp_path / "token"
    agent = TelemetryAgent(sink.url, TokenFile(token_file), NODE, FakeCollector(fake_time),
                           sleep=fake_time.sleep, clock=fake_time.clock)

    agent.collect_once()
    assert agent.flush() is False
    assert (agent.stats.failed_posts, agent.stats.dropped_rejected, len(agent.buffer)) == (1, 0, 2)
    assert sink.posts == []

    token_file.write_text(TOKEN)
    fake_time.now = agent.retry_at
    assert agent.flush() is True
    assert agent.stats.delivered == 2
