"""The `sink` fixture: a TelemetrySink stopped after the test if it still runs."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.nodes.agent.fakes import TelemetrySink


@pytest.fixture
def sink() -> Iterator[TelemetrySink]:
    server = TelemetrySink()
    yield server
    if server.running:
        server.stop()
