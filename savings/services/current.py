"""The cluster's savings now: its occupants read from the inventory, priced, and computed by
scheduler.core.savings.

Occupants are read from the occupied partitions (one query): a partition held by a gpuplane
placement belongs to that replica, one used by a pod the inventory found belongs to that pod, and
a GPU with something allocated but no partition rows is one occupant on its own (it is then
counted on whole GPUs, so it never claims a saving). The GPU-equivalents are nodes.figures', so
`allocated_gpu_equivalents` equals the overview's allocation total.

The result is kept per telemetry poll and until the inventory or allocation changes
(nodes.fleet.cached_per_poll), so the API, the overview, the savings page and /metrics show
the same figures.
"""
from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from django.conf import settings

from nodes.figures import gpu_equivalent
from nodes.fleet import cached_per_poll
from nodes.gpu_costs import gpu_prices
from nodes.holds import occupied_partition_filter, with_holder_id
from nodes.models import GPU, Partition
from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.savings import GPUCost, Holding, Occupant, Savings, compute_savings


def cluster_occupants() -> list[Occupant]:
    """Every replica and foreign pod holding GPU capacity, with what it holds on each GPU."""
    holdings: dict[str, list[Holding]] = defaultdict(list)
    rows = with_holder_id(Partition.objects.filter(occupied_partition_filter())).values_list(
        "holder_id", "pod", "gpu__uuid", "gpu__model", "kind", "share_milli", "mig_profile"
    ).order_by()  # no sort by node name and slot: it joins the nodes and sorts 40,000 rows for nothing
    for holder_id, pod, uuid, model, kind, share_milli, mig_profile in rows:
        key = f"placement:{holder_id}" if holder_id is not None else f"pod:{pod}"
        holdings[key].append(Holding(uuid, model, gpu_equivalent(kind, share_milli, mig_profile)))
    unpartitioned = GPU.objects.filter(partitions__isnull=True).exclude(allocated_milli=0, allocated_memory_mib=0).order_by()
    for uuid, model, milli in unpartitioned.values_list("uuid", "model", "allocated_milli"):
        # Memory handed out without compute still occupies the GPU (the calculator counts it 1 GPU).
        holdings[f"gpu:{uuid}"].append(Holding(uuid, model, Fraction(milli, SHARE_MILLI_FULL)))
    return [Occupant(key, tuple(held)) for key, held in holdings.items()]


def gpu_costs() -> dict[str, GPUCost]:
    """Price and power of each catalog model, as the calculator takes them."""
    return {key: GPUCost(price.usd_per_hour, price.power_w) for key, price in gpu_prices().items()}


def _compute() -> Savings:
    return compute_savings(cluster_occupants(), gpu_costs())


def current_savings() -> Savings:
    """The savings now: computed once per poll interval and inventory change, shared by every page."""
    return cached_per_poll("savings", _compute, sorted(settings.GPU_PRICE_USD_PER_HOUR.items()))
