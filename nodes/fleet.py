"""Fleet-wide figures that cost O(nodes), not O(GPUs), and the per-poll cache the fleet pages share.

- `node_tiles()`: one row per node (GPU count, GPUs reporting, mean utilization, power, compute
  allocated) aggregated by the database, for the overview's node map and `GET /api/v1/heatmap/`.
  Rows are arrays under a `columns` header and links are one template (`node_url`, filled in by
  the browser), so 5,000 nodes are a few hundred KB, not one object and two URLs per GPU.
- `node_figures()`: every node's GPUs summed by one GROUP BY (counts, sums, idle and allocated by
  nodes.summaries' rules in SQL): the one scan of the GPU table that the overview's cards, the
  node map and /metrics' node and cluster gauges all add up from (`fleet_node_figures()`: kept per
  poll, so the pages computed in one interval share it).
- `refresh_per_poll()`: recomputes and stores every per-poll figure (the per-node figures and
  node map here, the pages' own through `register_per_poll`), run after each telemetry poll and
  inventory sync (nodes.tasks), so that requests find them computed instead of paying the cold
  cost once per interval.
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
from datetime import datetime
from fractions import Fraction
from typing import Any, NamedTuple, TypeVar

from django.conf import settings
from django.core.cache import caches
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Count, Min, Q, Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from lifecycle.models import AuditEvent
from nodes.figures import gpu_equivalent
from nodes.holds import occupied_partition_filter
from nodes.models import GPU, Node, Partition
from nodes.summaries import allocated_filter, idle_filter, node_state
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind

T = TypeVar("T")

CACHE_ALIAS = "fleet"
# The values of each row of node_tiles()["nodes"], in order.
TILE_COLUMNS = ("name", "state", "gpus", "reporting", "utilization_pct", "power_w", "allocated")
_NAME_PLACEHOLDER = "__node__"


class NodeFigures(NamedTuple):
    """One node and its GPUs summed (all 0 / None for a node without GPUs).

    `allocated` / `idle`: GPUs that nodes.summaries.is_allocated / is_idle count (in SQL);
    `reporting`: GPUs with a utilization figure, `utilization_sum` theirs summed; `memory_used_n`,
    `power_n`: GPUs with that figure. A tuple: 5,000 of them pickle into the cache 5x faster than
    dataclasses.
    """

    node_id: int
    name: str
    ready: bool
    cordoned: bool
    sharing_mode: str
    gpus: int = 0
    allocated: int = 0
    idle: int = 0
    reporting: int = 0
    utilization_sum: float = 0.0
    memory_used_n: int = 0
    memory_used_mib: int = 0
    power_n: int = 0
    power_w: float = 0.0
    oldest_sampled_at: datetime | None = None
    allocated_milli: int = 0
    memory_mib: int = 0
    allocated_memory_mib: int = 0
    mig_on: int = 0

    @property
    def state(self) -> str:
        return node_state(self)

    @property
    def mean_utilization_pct(self) -> float | None:
        return self.utilization_sum / self.reporting if self.reporting else None


def node_figures(utilization_threshold: float | None = None, memory_threshold: float | None = None) -> list[NodeFigures]:
    """Every node, by name, with its GPUs summed by the database: two queries whatever the fleet's
    size (thresholds as nodes.summaries.is_idle's)."""
    per_node = GPU.objects.order_by().values("node_id").annotate(
        gpus=Count("id"), allocated=Count("id", filter=allocated_filter()),
        idle=Count("id", filter=idle_filter(utilization_threshold, memory_threshold)),
        reporting=Count("utilization_pct"), utilization_sum=Sum("utilization_pct"),
        memory_used_n=Count("memory_used_mib"), memory_used_mib=Sum("memory_used_mib"),
        power_n=Count("power_w"), power_w=Sum("power_w"), oldest_sampled_at=Min("sampled_at"),
        allocated_milli=Sum("allocated_milli"), memory_mib=Sum("memory_mib"),
        allocated_memory_mib=Sum("allocated_memory_mib"), mig_on=Count("id", filter=Q(mig_enabled=True)),
    ).values_list(
        "node_id", "gpus", "allocated", "idle", "reporting", "utilization_sum", "memory_used_n", "memory_used_mib",
        "power_n", "power_w", "oldest_sampled_at", "allocated_milli", "memory_mib", "allocated_memory_mib", "mig_on",
    )
    # Read through the cursor, without Django's converter per value (a third of the query's time
    # at 5,000 nodes): counts and integer sums come back as int, float sums as float on SQLite and
    # PostgreSQL alike; only the datetime needs what Django's SQLite backend does to it.
    connection = connections[per_node.db]
    sql, params = per_node.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        sums = {row[0]: row[1:] for row in cursor.fetchall()}
    figures = []
    for node_id, name, ready, cordoned, mode in Node.objects.order_by("name").values_list(
        "id", "name", "ready", "cordoned", "sharing_mode"
    ):
        row = sums.get(node_id)
        if row is None:
            figures.append(NodeFigures(node_id, name, ready, cordoned, mode))
            continue
        gpus, allocated, idle, reporting, utilization, used_n, used, power_n, power, oldest, milli, memory, allocated_memory, mig_on = row
        # A SUM over no value is NULL: 0 here, told apart by the counts (reporting, power_n, ...).
        figures.append(NodeFigures(
            node_id, name, ready, cordoned, mode, gpus, allocated, idle, reporting, utilization or 0.0, used_n, used or 0,
            power_n, power or 0.0, _as_datetime(oldest, connection), milli or 0, memory or 0, allocated_memory or 0, mig_on,
        ))
    return figures


def _as_datetime(value: datetime | str | None, connection: BaseDatabaseWrapper) -> datetime | None:
    """A MIN over a datetime column as Django returns it: SQLite answers text, in the connection's
    time zone (UTC); PostgreSQL an aware datetime already."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a datetime: {value!r}")
    return timezone.make_aware(parsed, connection.timezone) if settings.USE_TZ and timezone.is_naive(parsed) else parsed


def fleet_node_figures(*, refresh: bool = False) -> list[NodeFigures]:
    """node_figures() under the configured idle thresholds, kept per poll (cached_per_poll)."""
    thresholds = (settings.IDLE_UTILIZATION_PCT, settings.IDLE_MEMORY_PCT)
    return cached_per_poll("node-figures", lambda: node_figures(*thresholds), *thresholds, refresh=refresh)


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


def node_tiles(figures: list[NodeFigures] | None = None) -> dict[str, Any]:
    """Every node with GPUs as one compact row, JSON-ready; three queries whatever the fleet's size
    (one when `figures`, node_figures()' answer, are passed in).

    `{"columns": TILE_COLUMNS, "nodes": [[name, state, gpus, reporting, utilization_pct, power_w,
    allocated], ...], "node_url": "/nodes/{name}/", "gpus": n, "reporting_gpus": n}`, nodes by name. `state` as nodes.summaries.node_state; `reporting`:
    GPUs with a utilization figure; `utilization_pct`: their mean (null when none, 1 decimal);
    `power_w`: the node's GPUs' latest power summed (null when none reported, 1 decimal);
    `allocated`: compute handed out in GPU-equivalents (as the node list and node page, 2
    decimals). Nodes without GPUs are left out (they have nothing to draw).
    """
    corrections = mig_share_corrections()
    rows: list[list[Any]] = []
    for node in node_figures() if figures is None else figures:
        if not node.gpus:
            continue
        milli = node.allocated_milli
        correction = corrections.get(node.node_id)
        # Exact only where MIG needs it: a plain division is the same correctly rounded float.
        allocated = milli / SHARE_MILLI_FULL if correction is None else float(Fraction(milli, SHARE_MILLI_FULL) + correction)
        rows.append([
            node.name,
            node.state,
            node.gpus,
            node.reporting,
            _round(node.mean_utilization_pct, 1),
            _round(node.power_w, 1) if node.power_n else None,
            round(allocated, 2),
        ])
    return {
        "columns": list(TILE_COLUMNS),
        "nodes": rows,
        "node_url": node_url_template(),
        "gpus": sum(row[2] for row in rows),
        "reporting_gpus": sum(row[3] for row in rows),
    }


def fleet_node_tiles(*, refresh: bool = False) -> dict[str, Any]:
    """node_tiles() from the shared per-node figures, kept per poll: the overview's node map and
    GET /api/v1/heatmap/ read this one entry."""
    return cached_per_poll("node-tiles", lambda: node_tiles(fleet_node_figures()), refresh=refresh)


def inventory_mark() -> int:
    """The newest audit event's id (0 without any): it changes whenever inventory or allocation does."""
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def cached_per_poll(name: str, compute: Callable[[], T], *variant: object, refresh: bool = False) -> T:
    """`compute()`, kept for one telemetry poll interval and until the inventory changes.

    `variant`: whatever else the result depends on (settings such as idle thresholds), so that
    changing it never serves an answer computed under the old value. `refresh`: compute and store
    even when an entry exists (refresh_per_poll), kept REFRESH_GRACE_S longer than an interval so
    that it is still there when the next poll replaces it.
    """
    # Hashed: a variant such as a content type holds spaces, which some cache backends refuse.
    digest = hashlib.sha256(repr(variant).encode()).hexdigest()[:16]
    key = f"{name}:{inventory_mark()}:{digest}"
    cache = caches[CACHE_ALIAS]
    value = None if refresh else cache.get(key)
    if value is None:
        value = compute()
        grace = REFRESH_GRACE_S if refresh else 0
        cache.set(key, value, timeout=settings.TELEMETRY_POLL_INTERVAL_S + grace)
    return value


# How much longer than a poll interval a refreshed entry lives: the next poll's run (its hard time
# limit is 25 s) replaces it before it expires, so no request in between finds the cache cold.
REFRESH_GRACE_S = 30
_refreshers: list[Callable[[], object]] = []


def register_per_poll(refresh: Callable[[], object]) -> None:
    """Have refresh_per_poll() also call `refresh` (which recomputes and stores an app's per-poll
    figures, e.g. with cached_per_poll(..., refresh=True)); apps register theirs at startup."""
    if refresh not in _refreshers:
        _refreshers.append(refresh)


def refresh_per_poll() -> None:
    """Recompute and store every per-poll figure now: the per-node figures first (the rest add up
    from them), the node map, then what the apps registered."""
    fleet_node_figures(refresh=True)
    fleet_node_tiles(refresh=True)
    for refresh in list(_refreshers):
        refresh()
