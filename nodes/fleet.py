"""Fleet-wide figures that cost O(nodes), not O(GPUs), and the per-poll cache the fleet pages share.

- `node_tiles()`: one row per node (GPU count, GPUs reporting, mean utilization, power, compute
  allocated) aggregated by the database, for the overview's node map and `GET /api/v1/heatmap/`.
  Rows are arrays under a `columns` header and links are one template (`node_url`, filled in by
  the browser), so 5,000 nodes are a few hundred KB, not one object and two URLs per GPU.
- `cached_per_poll(name, compute)`: what the overview, the heatmap API and /metrics compute, kept
  in Django's "fleet" cache. Why this key: telemetry arrives once per poll interval, so the entry
  lives that long (TTL = settings.TELEMETRY_POLL_INTERVAL_S); every change of inventory or
  allocation writes an audit event, so the newest event's id is part of the key and a deploy, a
  cordon or a sync shows at once instead of up to one interval later. A version bumped by every
  writer instead would go stale for good the day one writer (a bulk update) forgets it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple, TypeVar

from django.conf import settings
from django.core.cache import caches
from django.db.models import Avg, Count, Sum
from django.urls import reverse

from lifecycle.models import AuditEvent
from nodes.figures import gpu_equivalent
from nodes.holds import occupied_partition_filter
from nodes.models import GPU, Node, Partition
from nodes.summaries import node_state
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind

T = TypeVar("T")

CACHE_ALIAS = "fleet"
# The values of each row of node_tiles()["nodes"], in order.
TILE_COLUMNS = ("name", "state", "gpus", "reporting", "utilization_pct", "power_w", "allocated")
_NAME_PLACEHOLDER = "__node__"


class _Flags(NamedTuple):
    ready: bool
    cordoned: bool


def mig_share_corrections(node_ids: list[int] | None = None) -> dict[int, Fraction]:
    """Per node (of `node_ids`, default all), what its occupied MIG instances add on top of their
    stored, rounded-down shares (3g: 3/7 - 0.428), so that GPU.allocated_milli sums read as exact
    GPU-equivalents. One query."""
    corrections: dict[int, Fraction] = {}
    occupied = Partition.objects.filter(occupied_partition_filter(), kind=PartitionKind.MIG).order_by()
    if node_ids is not None:
        occupied = occupied.filter(gpu__node__in=node_ids)
    for node_id, share_milli, profile in occupied.values_list("gpu__node_id", "share_milli", "mig_profile"):
        exact = gpu_equivalent(PartitionKind.MIG, share_milli, profile) - Fraction(share_milli, SHARE_MILLI_FULL)
        corrections[node_id] = corrections.get(node_id, Fraction(0)) + exact
    return corrections


def node_url_template() -> str:
    """The node page's URL with `{name}` where the node's name goes: one reverse() for the page."""
    return reverse("nodes:node-detail", args=[_NAME_PLACEHOLDER]).replace(_NAME_PLACEHOLDER, "{name}")


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def node_tiles() -> dict[str, Any]:
    """Every node with GPUs as one compact row, JSON-ready; three queries whatever the fleet's size.

    `{"columns": TILE_COLUMNS, "nodes": [[name, state, gpus, reporting, utilization_pct, power_w,
    allocated], ...], "node_url": "/nodes/{name}/", "gpus": n, "reporting_gpus": n}`, nodes by name. `state` as nodes.summaries.node_state; `reporting`:
    GPUs with a utilization figure; `utilization_pct`: their mean (null when none, 1 decimal);
    `power_w`: the node's GPUs' latest power summed (null when none reported, 1 decimal);
    `allocated`: compute handed out in GPU-equivalents (as the node list and node page, 2
    decimals). Nodes without GPUs are left out (they have nothing to draw).
    """
    per_node = (
        GPU.objects.order_by().values("node_id").annotate(
            gpus=Count("id"), reporting=Count("utilization_pct"), utilization=Avg("utilization_pct"),
            power=Sum("power_w"), power_n=Count("power_w"),
            allocated_milli=Sum("allocated_milli"),
        )
    )
    figures = {row["node_id"]: row for row in per_node}
    corrections = mig_share_corrections()
    rows: list[list[Any]] = []
    for node_id, name, ready, cordoned in Node.objects.order_by("name").values_list("id", "name", "ready", "cordoned"):
        row = figures.get(node_id)
        if row is None:
            continue
        milli = row["allocated_milli"] or 0
        correction = corrections.get(node_id)
        # Exact only where MIG needs it: a plain division is the same correctly rounded float.
        allocated = milli / SHARE_MILLI_FULL if correction is None else float(Fraction(milli, SHARE_MILLI_FULL) + correction)
        rows.append([
            name,
            node_state(_Flags(ready, cordoned)),
            row["gpus"],
            row["reporting"],
            _round(row["utilization"], 1),
            _round(row["power"], 1) if row["power_n"] else None,
            round(allocated, 2),
        ])
    return {
        "columns": list(TILE_COLUMNS),
        "nodes": rows,
        "node_url": node_url_template(),
        "gpus": sum(row[2] for row in rows),
        "reporting_gpus": sum(row[3] for row in rows),
    }


def inventory_mark() -> int:
    """The newest audit event's id (0 without any): it changes whenever inventory or allocation does."""
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def cached_per_poll(name: str, compute: Callable[[], T], *variant: object) -> T:
    """`compute()`, kept for one telemetry poll interval and until the inventory changes.

    `variant`: whatever else the result depends on (settings such as idle thresholds), so that
    changing it never serves an answer computed under the old value.
    """
    # Hashed: a variant such as a content type holds spaces, which some cache backends refuse.
    digest = hashlib.sha256(repr(variant).encode()).hexdigest()[:16]
    key = f"{name}:{inventory_mark()}:{digest}"
    cache = caches[CACHE_ALIAS]
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, timeout=settings.TELEMETRY_POLL_INTERVAL_S)
    return value
