"""`/metrics`: gpuplane's state and its own process metrics in the Prometheus text format.

Two sources are exposed on each scrape:

- Inventory and telemetry gauges, read from the database by InventoryCollector and kept for one
  telemetry poll interval in the shared "fleet" cache (so every web process answers the same):
  GPUs by sharing mode, allocated and idle GPUs, power, nodes by state, and per node its GPUs,
  allocated and idle GPUs, mean utilization, memory used, power and telemetry age. Per-GPU
  utilization / memory / power / temperature / age only with GPUPLANE_METRICS_PER_GPU=true
  (DCGM's exporter is the per-GPU source).
- Process metrics registered with prometheus_client's default registry: the placement decision
  latency histogram below and the gpuplane_* counters that later features declare in this
  module, plus the client's own python_* / process_* metrics. With several web or worker
  processes, set PROMETHEUS_MULTIPROC_DIR (prometheus_client's multiprocess mode) to a directory
  shared by them; the view then sums what every process recorded.

Access: /metrics is open, like most exporters, unless settings.GPUPLANE_METRICS_TOKEN is set;
then a scrape needs `Authorization: Bearer <token>` (Prometheus: `authorization: {credentials:
...}` in the scrape config) and anything else gets 401. The endpoint exposes node names and GPU
UUIDs, so set the token where the network does not already keep scrapers apart.
"""
from __future__ import annotations

import hmac
import os
import re
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views import View
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from nodes.fleet import NodeFigures, cached_per_poll, fleet_node_figures
from nodes.models import GPU
from nodes.summaries import NODE_STATES
from nodes.telemetry.exposition import CONTENT_TYPE as EXPOSITION_CONTENT_TYPE
from nodes.telemetry.exposition import dcgm_exposition
from nodes.vocabulary import SharingMode

# --- Process metrics ---------------------------------------------------------------------------
# Declared once, here, so that every module observes into the same objects. Later features add
# their gpuplane_* counters below (e.g. `Counter("gpuplane_placements_total", ..., ["result"])`).

PLACEMENT_DECISION_SECONDS = Histogram(
    "gpuplane_placement_decision_seconds",
    "Time one placement request took, as its user waits for it: validation, inventory snapshot, the "
    "decision of every replica, reservation and the cluster calls that start the workloads (failures included).",
    # Milliseconds on a small cluster; seconds where a snapshot rebuild or a slow cluster API dominates.
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

# The admission webhook (scheduler/admission.py): every review by what it came to; "error" counts
# the reviews that failed inside gpuplane and admitted the pod unchanged (fail open).
WEBHOOK_REVIEWS = Counter(
    "gpuplane_webhook_reviews_total",
    "AdmissionReviews answered, by result: placed, unplaced, left-alone, refused (quota), error (admitted unchanged).",
    ["result"],
)
WEBHOOK_REVIEW_SECONDS = Histogram(
    "gpuplane_webhook_review_seconds",
    "Time one AdmissionReview took inside gpuplane, by result.",
    ["result"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)

MIB = 1024 * 1024
_OPENMETRICS_EOF = b"# EOF\n"

class _NodeRow(NamedTuple):
    name: str
    ready: bool
    cordoned: bool
    sharing_mode: str


@dataclass(slots=True)
class _GPURow:
    """The columns a per-GPU series reads of one GPU, lighter than a model."""

    node_id: int
    index: int
    uuid: str
    model: str
    utilization_pct: float | None
    memory_used_mib: int | None
    power_w: float | None
    temperature_c: float | None
    sampled_at: datetime | None


class InventoryCollector(Collector):
    """Gauges summed from the per-node figures (nodes.fleet.node_figures: one GROUP BY over the
    GPUs, shared per poll with the overview and the node map), plus the GPU rows only for the
    per-GPU series.

    Cluster totals and one series per node for each figure; one series per GPU only with
    settings.GPUPLANE_METRICS_PER_GPU (off: 40,000 GPUs would be 200,000 series a scrape, and
    NVIDIA's DCGM exporter already exports them). A figure nothing reported has no series (absent,
    not 0), so alerts on `absent()` or staleness work as Prometheus users expect.
    """

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        figures = fleet_node_figures()
        by_mode = GaugeMetricFamily("gpuplane_gpus", "GPUs known to gpuplane, by their node's sharing mode.", labels=["sharing_mode"])
        mode_counts: Tally[str] = Tally()
        for node in figures:
            if node.gpus:
                mode_counts[node.sharing_mode] += node.gpus
        # Every mode always has a series (0 included), so dashboards do not show "no data".
        for mode in [*SharingMode.values(), *sorted(set(mode_counts) - set(SharingMode.values()))]:
            by_mode.add_metric([mode], mode_counts.get(mode, 0))
        yield by_mode

        yield GaugeMetricFamily(
            "gpuplane_gpus_allocated",
            "GPUs with any compute share or memory handed out by gpuplane or found in use by a pod.",
            value=sum(node.allocated for node in figures),
        )
        yield GaugeMetricFamily(
            "gpuplane_gpus_idle",
            f"GPUs idle by seed 004: utilization < {settings.IDLE_UTILIZATION_PCT} % and memory used < "
            f"{settings.IDLE_MEMORY_PCT} % of total; without telemetry, nothing allocated.",
            value=sum(node.idle for node in figures),
        )
        if any(node.power_n for node in figures):  # absent, not 0, while no GPU has reported power
            yield GaugeMetricFamily(
                "gpuplane_power_watts", "Latest power draw of every GPU that reported it, summed.",
                value=sum(node.power_w for node in figures),
            )

        node_states = GaugeMetricFamily(
            "gpuplane_nodes", "Nodes by state: notready (whether cordoned or not), cordoned (ready), ready (schedulable).",
            labels=["state"],
        )
        state_counts = Tally(node.state for node in figures)
        for state in NODE_STATES:
            node_states.add_metric([state], state_counts.get(state, 0))
        yield node_states

        yield from node_gauges(figures, now)
        if settings.GPUPLANE_METRICS_PER_GPU:
            nodes = {node.node_id: _NodeRow(node.name, node.ready, node.cordoned, node.sharing_mode) for node in figures}
            gpus = [
                _GPURow(*row)
                for row in GPU.objects.order_by("node_id", "index").values_list(
                    "node_id", "index", "uuid", "model", "utilization_pct", "memory_used_mib", "power_w", "temperature_c",
                    "sampled_at",
                )
            ]
            yield from self._gpu_gauges(gpus, nodes, now)

    @staticmethod
    def _gpu_gauges(gpus: Iterable[_GPURow], nodes: dict[int, _NodeRow], now: datetime) -> Iterator[Metric]:
        gpu_labels = ["node", "gpu", "uuid", "model"]
        utilization = GaugeMetricFamily("gpuplane_gpu_utilization_percent", "Latest GPU utilization reported.", labels=gpu_labels)
        memory_used = GaugeMetricFamily("gpuplane_gpu_memory_used_bytes", "Latest GPU memory used reported.", labels=gpu_labels)
        power = GaugeMetricFamily("gpuplane_gpu_power_watts", "Latest GPU power draw reported.", labels=gpu_labels)
        temperature = GaugeMetricFamily(
            "gpuplane_gpu_temperature_celsius", "Latest GPU temperature reported.", labels=gpu_labels
        )
        age = GaugeMetricFamily(
            "gpuplane_telemetry_age_seconds", "Seconds since the GPU's latest telemetry sample was taken.", labels=["node", "gpu"]
        )
        for gpu in gpus:
            node_name = nodes[gpu.node_id].name
            labels = [node_name, str(gpu.index), gpu.uuid, gpu.model]
            if gpu.utilization_pct is not None:
                utilization.add_metric(labels, gpu.utilization_pct)
            if gpu.memory_used_mib is not None:
                memory_used.add_metric(labels, gpu.memory_used_mib * MIB)
            if gpu.power_w is not None:
                power.add_metric(labels, gpu.power_w)
            if gpu.temperature_c is not None:
                temperature.add_metric(labels, gpu.temperature_c)
            if gpu.sampled_at is not None:
                age.add_metric([node_name, str(gpu.index)], _age_s(now, gpu.sampled_at))
        yield from (utilization, memory_used, power, temperature, age)


def _age_s(now: datetime, sampled_at: datetime) -> float:
    # A sample stamped slightly ahead of this clock (agent skew) is 0 s old, not negative.
    return max(0.0, (now - sampled_at).total_seconds())


def node_gauges(figures: Iterable[NodeFigures], now: datetime) -> Iterator[Metric]:
    """One series per node (with GPUs) for each figure: counted as the cluster totals are, so the
    node series of a figure add up to its cluster series."""
    labels = ["node"]
    count = GaugeMetricFamily("gpuplane_node_gpus", "GPUs on the node.", labels=labels)
    allocated = GaugeMetricFamily("gpuplane_node_gpus_allocated", "The node's GPUs with anything handed out.", labels=labels)
    idle = GaugeMetricFamily("gpuplane_node_gpus_idle", "The node's GPUs idle, as gpuplane_gpus_idle counts them.", labels=labels)
    utilization = GaugeMetricFamily(
        "gpuplane_node_utilization_percent", "Mean latest utilization of the node's GPUs that reported one.", labels=labels
    )
    memory_used = GaugeMetricFamily("gpuplane_node_memory_used_bytes", "Latest memory used on the node's GPUs, summed.", labels=labels)
    power = GaugeMetricFamily("gpuplane_node_power_watts", "Latest power draw of the node's GPUs, summed.", labels=labels)
    age = GaugeMetricFamily(
        "gpuplane_node_telemetry_age_seconds", "Seconds since the node's stalest GPU telemetry sample was taken.", labels=labels
    )
    for node in figures:
        if not node.gpus:
            continue
        name = [node.name]
        count.add_metric(name, node.gpus)
        allocated.add_metric(name, node.allocated)
        idle.add_metric(name, node.idle)
        if node.reporting:
            utilization.add_metric(name, node.utilization_sum / node.reporting)
        if node.memory_used_n:
            memory_used.add_metric(name, node.memory_used_mib * MIB)
        if node.power_n:
            power.add_metric(name, node.power_w)
        if node.oldest_sampled_at is not None:
            age.add_metric(name, _age_s(now, node.oldest_sampled_at))
    yield from (count, allocated, idle, utilization, memory_used, power, age)


# Collectors the apps register at startup (their AppConfig.ready), scraped with the inventory's:
# gpuplane sits below the apps, so it cannot import their figures itself.
_registered_collectors: list[Collector] = []


def register_collector(collector: Collector) -> None:
    """Add `collector`'s metrics to every /metrics scrape (kept, like the inventory's, per poll)."""
    _registered_collectors.append(collector)


class _OneFamily(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        yield self.family


_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _node_series_only(family: Metric) -> bool:
    """A gauge of plain samples labelled by `node` alone: what encode() writes itself."""
    return family.type == "gauge" and bool(_LEGACY_NAME.match(family.name)) and all(
        sample.name == family.name and sample.labels.keys() == {"node"} and sample.timestamp is None
        and sample.exemplar is None and sample.native_histogram is None
        for sample in family.samples
    )


def encode(encoder: Callable[[Collector], bytes], sources: Collector) -> bytes:
    """`encoder(sources)`, byte for byte (tests/gpuplane/test_metrics.py compares), faster.

    prometheus_client formats each sample with name and label checks that cost ~5 us; 5,000
    nodes x 7 per-node gauges are 35,000 samples. The per-node gauges' lines are written here
    (the same in the text format and OpenMetrics: `name{node="escaped"} value`), the headers and
    every other family by `encoder` itself.
    """
    eof = encoder(_ScrapeSources())  # b"" in the text format, b"# EOF\n" in OpenMetrics
    parts: list[bytes] = []
    for family in sources.collect():
        if not family.samples or not _node_series_only(family):
            parts.append(encoder(_OneFamily(family)).removesuffix(eof))
            continue
        samples, family.samples = family.samples, []
        parts.append(encoder(_OneFamily(family)).removesuffix(eof))  # the HELP and TYPE lines
        family.samples = samples
        name = family.name
        parts.append("".join([
            f'{name}{{node="{_escape_label_value(sample.labels["node"])}"}} {floatToGoString(sample.value)}\n'
            for sample in samples
        ]).encode())
    parts.append(eof)
    return b"".join(parts)


def _escape_label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


class _ScrapeSources(Collector):
    """The process registry and the database collector, read as one registry by the encoders."""

    def __init__(self, *sources: Collector) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


def process_registry() -> Collector:
    """prometheus_client's default registry, or the merged files of every process in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def scrape_authorized(request: HttpRequest) -> bool:
    """True when no metrics token is configured or the request carries it as a Bearer token."""
    token: str = settings.GPUPLANE_METRICS_TOKEN
    if not token:
        return True
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    # Constant-time comparison: the token must not leak through response timing.
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token.encode())


def scrape_refused() -> HttpResponse:
    """401 for a scrape without the metrics token."""
    response = HttpResponse("A valid metrics token is required.\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="gpuplane metrics"'
    return response


class MetricsView(View):
    """`GET /metrics`: Prometheus text format (or OpenMetrics when the scraper asks for it)."""

    http_method_names = ["get", "head"]

    def get(self, request: HttpRequest) -> HttpResponse:
        if not scrape_authorized(request):
            return scrape_refused()
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Process metrics live; the inventory's text kept for one poll interval (nodes.fleet:
        # several Prometheus servers or a fast scrape interval cost one computation and one
        # encoding per interval). Both are whole metric families, so the texts concatenate; the
        # OpenMetrics end marker goes once, at the end.
        inventory = inventory_text(request.headers.get("Accept", ""))
        process = encoder(_ScrapeSources(process_registry())).removesuffix(_OPENMETRICS_EOF)
        return HttpResponse(process + inventory, content_type=content_type)


# What Prometheus asks for (OpenMetrics) and what a plain client gets (the text format).
SCRAPE_FORMATS = ("application/openmetrics-text; version=1.0.0", "")


def inventory_text(accept: str, *, refresh: bool = False) -> bytes:
    """The inventory's and registered collectors' metrics, encoded for `accept`, kept per poll
    (`refresh`: recompute now, nodes.fleet.refresh_per_poll)."""
    encoder, content_type = choose_encoder(accept)
    variant = (
        content_type, settings.GPUPLANE_METRICS_PER_GPU, settings.IDLE_UTILIZATION_PCT, settings.IDLE_MEMORY_PCT,
        sorted(settings.GPU_PRICE_USD_PER_HOUR.items()),  # the savings gauges' prices
    )
    sources = _ScrapeSources(InventoryCollector(), *_registered_collectors)
    return cached_per_poll("metrics", lambda: encode(encoder, sources), *variant, refresh=refresh)


class DCGMExpositionView(View):
    """`GET /metrics/dcgm`: the latest per-GPU readings in DCGM exporter's format
    (nodes.telemetry.exposition), for Prometheus as the time-series store; access as /metrics."""

    http_method_names = ["get", "head"]

    def get(self, request: HttpRequest) -> HttpResponse:
        if not scrape_authorized(request):
            return scrape_refused()
        return HttpResponse(dcgm_exposition(), content_type=EXPOSITION_CONTENT_TYPE)
