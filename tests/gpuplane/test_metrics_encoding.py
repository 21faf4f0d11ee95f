"""/metrics' encoding: gpuplane.observability.encode writes the per-node gauges' lines itself, and
its output must be the prometheus_client encoder's, byte for byte, in both formats."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from gpuplane.observability import InventoryCollector, _node_series_only, _registered_collectors, encode
from nodes.models import GPU
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db


class _Frozen(Collector):
    """The same families on every collect (the live collector's telemetry ages move with the clock)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


@pytest.mark.parametrize("encoder", [generate_latest, generate_openmetrics], ids=["text", "openmetrics"])
@pytest.mark.parametrize("per_gpu", [False, True])
def test_it_encodes_as_prometheus_client_does(settings, encoder, per_gpu):
    settings.GPUPLANE_METRICS_PER_GPU = per_gpu
    make_node("gpu-a", gpu_count=3)
    make_node('odd "quoted" \\ back\nslash', gpu_count=1)  # every character a label value escapes
    make_node("no-gpus", gpu_count=0)
    GPU.objects.filter(node__name="gpu-a", index=0).update(
        utilization_pct=12.5, memory_used_mib=8192, power_w=1e7 / 3, sampled_at=timezone.now()
    )
    GPU.objects.filter(node__name="gpu-a", index=1).update(utilization_pct=0.1, power_w=300.0, allocated_milli=500)
    families = list(InventoryCollector().collect()) + [f for c in _registered_collectors for f in c.collect()]
    assert sum(_node_series_only(family) and bool(family.samples) for family in families) >= 6  # the fast path runs
    sources = _Frozen(families)

    assert encode(encoder, sources) == encoder(sources)
