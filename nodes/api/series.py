"""Telemetry read endpoints for the charts: per-GPU and per-node time series, and the fleet's node map.

- `GET /api/v1/gpus/{uuid}/series/?range=1h|6h|24h|7d|30d`
- `GET /api/v1/nodes/{name}/series/?range=...`
- `GET /api/v1/heatmap/`: every node's GPUs, utilization, power and allocation (the overview's node map).

A range that starts inside the raw retention window (settings.TELEMETRY_RAW_RETENTION_H, 24 h)
is answered from raw samples (`"resolution": "raw"`), a longer one from the rollup buckets
(`"resolution": "5m"` for the default 300 s bucket); nodes.telemetry.series decides which rows that
means. With settings.GPUPLANE_PROMETHEUS_URL set the series come from Prometheus instead
(nodes.telemetry.prometheus, same resolutions and point shape); a Prometheus that cannot answer
is a 503 whose `detail` says why. An unknown range is a 400 that lists the choices. Reads need
the viewer role.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.strict_input import StrictQueryParametersMixin
from nodes.fleet import fleet_node_tiles
from nodes.models import GPU, Node
from nodes.telemetry import prometheus
from nodes.telemetry import series as database

RANGES: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
DEFAULT_RANGE = "1h"
RAW = "raw"


def parse_range(request: Request) -> str:
    """The `range` query parameter (default 1h); ValidationError (400) naming the choices otherwise."""
    value = request.query_params.get("range", DEFAULT_RANGE)
    if value not in RANGES:
        raise exceptions.ValidationError({"range": [f"Choose one of: {', '.join(RANGES)}."]})
    return value


def bucket_label(bucket_s: int) -> str:
    """A rollup bucket as a resolution label: 300 -> "5m", 3600 -> "1h", 90 -> "90s"."""
    if bucket_s % 3600 == 0:
        return f"{bucket_s // 3600}h"
    if bucket_s % 60 == 0:
        return f"{bucket_s // 60}m"
    return f"{bucket_s}s"


def resolution_for(start: datetime, now: datetime) -> str:
    """"raw" when `start` lies inside the raw retention window, else the rollup bucket's label.

    The same rule nodes.telemetry.series.gpu_series applies to choose between raw samples and rollups.
    """
    if start >= now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H):
        return RAW
    return bucket_label(settings.TELEMETRY_ROLLUP_BUCKET_S)


class TelemetryStoreUnavailable(exceptions.APIException):
    status_code = 503
    default_detail = "The telemetry store is unavailable."
    default_code = "telemetry_store_unavailable"


def gpu_points(gpu: GPU, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """The GPU's series from the configured store (Prometheus, else the database); 503 when Prometheus cannot answer."""
    try:
        if prometheus.enabled():
            return prometheus.gpu_series(gpu, start, end, now=end)
        return database.gpu_series(gpu, start, end, now=end)
    except prometheus.PrometheusUnavailable as exc:
        raise TelemetryStoreUnavailable(f"Telemetry store unavailable: {exc}") from exc


def node_points(node: Node, start: datetime, end: datetime) -> dict[str, list[dict[str, Any]]]:
    """The node's series per GPU UUID from the configured store, as `gpu_points`."""
    try:
        if prometheus.enabled():
            return prometheus.node_series(node, start, end, now=end)
        return database.node_series(node, start, end, now=end)
    except prometheus.PrometheusUnavailable as exc:
        raise TelemetryStoreUnavailable(f"Telemetry store unavailable: {exc}") from exc


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _rounded(value: Any) -> float | None:
    # One decimal is more than a chart can show and keeps a 30-day node series small.
    return None if value is None else round(float(value), 1)


def chart_point(row: Mapping[str, Any]) -> dict[str, Any]:
    """One point from nodes.telemetry.series (a raw sample, or a rollup bucket with its means) as the API shows it."""
    memory = row["memory_used_mib"]
    return {
        "ts": _iso(row["ts"]),
        "utilization_pct": _rounded(row["utilization_pct"]),
        "memory_used_mib": None if memory is None else round(memory),
        "power_w": _rounded(row["power_w"]),
        "temperature_c": _rounded(row["temperature_c"]),
    }


def chart_points(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [chart_point(row) for row in rows]


# --- response shapes (for the OpenAPI schema; the views build plain dicts for speed) ------------


class SeriesPointSerializer(serializers.Serializer):
    ts = serializers.DateTimeField(help_text="Sample time, or the start of the rollup bucket (UTC).")
    utilization_pct = serializers.FloatField(allow_null=True, help_text="Rounded to 0.1; bucket mean for rollups.")
    memory_used_mib = serializers.IntegerField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)
    temperature_c = serializers.FloatField(allow_null=True)


class GPUSeriesSerializer(serializers.Serializer):
    gpu = serializers.CharField(help_text="GPU UUID.")
    range = serializers.ChoiceField(choices=list(RANGES))
    resolution = serializers.CharField(help_text='"raw" for raw samples, else the rollup bucket, e.g. "5m".')
    points = SeriesPointSerializer(many=True)


class NodeGPUSeriesSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    points = SeriesPointSerializer(many=True)


class NodeSeriesSerializer(serializers.Serializer):
    node = serializers.CharField()
    range = serializers.ChoiceField(choices=list(RANGES))
    resolution = serializers.CharField(help_text='"raw" for raw samples, else the rollup bucket, e.g. "5m".')
    gpus = serializers.DictField(child=NodeGPUSeriesSerializer(), help_text="Keyed by GPU UUID; every GPU of the node.")


class HeatmapSerializer(serializers.Serializer):
    columns = serializers.ListField(
        child=serializers.CharField(), help_text="What each value of a node row is, in order (nodes.fleet.TILE_COLUMNS)."
    )
    nodes = serializers.ListField(
        child=serializers.ListField(child=serializers.JSONField()),
        help_text="One row per node with GPUs, by name: name, state (ready / cordoned / notready), GPUs, GPUs "
        "reporting, mean utilization % (null: none reporting), power W (null: none reported), allocated "
        "GPU-equivalents.",
    )
    node_url = serializers.CharField(help_text='The node page\'s URL with "{name}" where the name goes.')
    gpus = serializers.IntegerField(help_text="GPUs on the nodes listed.")
    reporting_gpus = serializers.IntegerField(help_text="GPUs with a utilization figure.")

RANGE_PARAMETER = OpenApiParameter(
    "range", OpenApiTypes.STR, enum=list(RANGES), default=DEFAULT_RANGE,
    description="How far back from now. Ranges within the raw retention window are raw samples, longer ones rollups.",
)
BAD_RANGE = OpenApiResponse(description="Unknown range; the message lists the choices.")
STORE_UNAVAILABLE = OpenApiResponse(description="Prometheus (GPUPLANE_PROMETHEUS_URL) could not answer; `detail` says why.")


class GPUSeriesView(StrictQueryParametersMixin, APIView):
    """Time series of one GPU over the chosen range."""

    query_parameters = ("range",)

    @extend_schema(
        operation_id="gpus_series_retrieve",
        parameters=[RANGE_PARAMETER],
        responses={
            200: GPUSeriesSerializer, 400: BAD_RANGE, 404: OpenApiResponse(description="No GPU with this UUID."),
            503: STORE_UNAVAILABLE,
        },
    )
    def get(self, request: Request, uuid: str) -> Response:
        range_key = parse_range(request)
        gpu = get_object_or_404(GPU, uuid=uuid)
        end = timezone.now()
        start = end - RANGES[range_key]
        return Response({
            "gpu": gpu.uuid,
            "range": range_key,
            "resolution": resolution_for(start, end),
            "points": chart_points(gpu_points(gpu, start, end)),
        })


class NodeSeriesView(StrictQueryParametersMixin, APIView):
    """Time series of every GPU of one node over the chosen range."""

    query_parameters = ("range",)

    @extend_schema(
        operation_id="nodes_series_retrieve",
        parameters=[RANGE_PARAMETER],
        responses={
            200: NodeSeriesSerializer, 400: BAD_RANGE, 404: OpenApiResponse(description="No node with this name."),
            503: STORE_UNAVAILABLE,
        },
    )
    def get(self, request: Request, name: str) -> Response:
        range_key = parse_range(request)
        node = get_object_or_404(Node, name=name)
        end = timezone.now()
        start = end - RANGES[range_key]
        series = node_points(node, start, end)
        # Every GPU is listed, reporting or not, so a chart can say which GPUs have no data yet.
        gpus = node.gpus.order_by("index").values_list("uuid", "index")
        return Response({
            "node": node.name,
            "range": range_key,
            "resolution": resolution_for(start, end),
            "gpus": {uuid: {"index": index, "points": chart_points(series.get(uuid, ()))} for uuid, index in gpus},
        })


class HeatmapView(StrictQueryParametersMixin, APIView):
    """Every node's GPUs, utilization, power and allocation, one compact row each: the overview
    node map's refresh. Cached for one poll interval (nodes.fleet.cached_per_poll)."""

    @extend_schema(operation_id="heatmap_retrieve", responses={200: HeatmapSerializer})
    def get(self, request: Request) -> Response:
        return Response(fleet_node_tiles())
