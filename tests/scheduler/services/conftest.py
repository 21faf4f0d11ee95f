"""The `cluster` fixture: the demo cluster in the simulator, inventory synced."""
from __future__ import annotations

import pytest

from tests.scheduler.inventory import demo_cluster


@pytest.fixture
def cluster():
    return demo_cluster()
