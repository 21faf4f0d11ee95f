"""bench/deploy_api.py's own logic: the over-allocation check and the percentile (the HTTP run is fleet-scale)."""
from __future__ import annotations

import pytest

from bench import deploy_api
from nodes.models import GPU
from tests.nodes.factories import make_node, make_partition

pytestmark = pytest.mark.django_db


def test_a_sound_inventory_has_no_over_allocation():
    node = make_node("n1", gpu_count=2)
    GPU.objects.filter(node=node, index=0).update(allocated_milli=1000, allocated_memory_mib=1024)
    assert deploy_api.over_allocations() == 0


def test_held_partitions_beyond_the_gpu_are_an_over_allocation_whatever_the_counters_say():
    # The database's check constraints keep the counters within the GPU; held partitions are not summed by it.
    node = make_node("n1", gpu_count=1, partitions=False)
    gpu = node.gpus.get()
    make_partition(gpu, kind="mps", slot=0, share_milli=600, memory_mib=1024, pod="a/p0")
    make_partition(gpu, kind="mps", slot=1, share_milli=600, memory_mib=1024, pod="a/p1")
    assert deploy_api.over_allocations() == 1


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert deploy_api.percentile(values, 50) == 50.0
    assert deploy_api.percentile(values, 99) == 99.0
    assert deploy_api.percentile([], 50) == 0.0


def test_it_refuses_the_test_suites_databases():
    for name in ("test", "test_test"):
        with pytest.raises(SystemExit, match="refusing"):
            deploy_api.recreate_database(f"postgres://postgres@127.0.0.1:5432/{name}")
