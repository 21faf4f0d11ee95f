"""Fixtures of the simulated cluster tests: a fake clock and a cluster on a fresh state file."""
import pytest

from nodes.cluster.sim import SimulatedCluster


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def state_path(tmp_path):
    return tmp_path / "cluster.json"


@pytest.fixture
def cluster(state_path, clock):
    return SimulatedCluster(state_path, clock=clock, pod_ready_delay_s=2.0, mig_reconfigure_s=5.0)
