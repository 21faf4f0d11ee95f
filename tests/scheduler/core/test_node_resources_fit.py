"""Filter NodeResourcesFit: CPU and host memory, as the kubelet would judge the pinned pod."""
from __future__ import annotations

import dataclasses

from scheduler.core import ClusterSnapshot, scheduler_for
from scheduler.core.plugins import NodeResourcesFit
from tests.scheduler.core.builders import filter_codes, make_node, request


def _host(name: str, cpu: int | None, cpu_used: int = 0, memory: int | None = None, memory_used: int = 0):
    return dataclasses.replace(make_node(name), cpu_allocatable_milli=cpu, cpu_requested_milli=cpu_used,
                               memory_allocatable_mib=memory, memory_requested_mib=memory_used)


def test_node_resources_fit_table():
    snapshot = ClusterSnapshot([
        _host("roomy", 8000, 2000, 65536, 1024),
        _host("cpu-full", 8000, 6500, 65536),
        _host("memory-full", 8000, 0, 4096, 3072),
        _host("unknown", None),
    ])
    req = request(cpu_milli=2000, host_memory_mib=2048)
    assert filter_codes(NodeResourcesFit(), snapshot, req) == {
        "roomy": 0, "cpu-full": 1, "memory-full": 2, "unknown": 0,
    }
    # A request that states neither passes everywhere, as before the core knew host resources.
    assert set(filter_codes(NodeResourcesFit(), snapshot, request()).values()) == {0}


def test_the_default_profile_never_pins_a_pod_where_cpu_is_exhausted():
    snapshot = ClusterSnapshot([_host("cpu-full", 8000, 7000), _host("free", 8000, 0)])
    decision = scheduler_for("balanced").schedule(request(cpu_milli=4000, key="team/a#0"), snapshot)
    assert decision.assignment is not None and decision.assignment.node == "free"
    decision = scheduler_for("balanced").schedule(request(cpu_milli=9000, key="team/b#0"), snapshot)
    assert decision.assignment is None
    assert "0/2 nodes are available" in decision.message and "insufficient CPU" in decision.message
