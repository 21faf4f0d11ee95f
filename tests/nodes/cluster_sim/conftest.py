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
    """Device plugin restarts are instant here; `slow_plugin_cluster` has the delay a real one has."""
    return SimulatedCluster(state_path, clock=clock, pod_ready_delay_s=2.0, mig_reconfigure_s=5.0, plugin_restart_s=0)


@pytest.fixture
def slow_plugin_cluster(state_path, clock):
    """A restarted device plugin pod is ready 3 s later, as the simulator's default has it."""
    return SimulatedCluster(state_path, clock=clock, pod_ready_delay_s=2.0, mig_reconfigure_s=5.0, plugin_restart_s=3.0)


@pytest.fixture(autouse=True)
def verify_store(monkeypatch):
    """Every commit checks that no object changed without being handed out, and the indexes."""
    monkeypatch.setattr("nodes.cluster.sim.store.VERIFY", True)
