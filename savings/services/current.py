"""The cluster's savings now: its occupants read from the inventory, priced, and computed by
scheduler.core.savings's rules.

Occupants are read from the occupied partitions (one query): a partition held by a gpuplane
placement belongs to that replica, one used by a pod the inventory found belongs to that pod, and
a GPU with something allocated but no partition rows is one occupant on its own (it is then
counted on whole GPUs, so it never claims a saving). Only workloads that run count (issue 18): a
replica gpuplane placed counts once its pod runs (placement ``running``), not while it is reserved
or starting, nor when its pod failed, so a workload that was lost (evicted, its replacement never
running) takes its GPUs off the baseline and off the used GPUs together and the saving can only
fall; what is left out is said, never silent (``savings.services.not_running``). The inventory
finds other teams' pods only while they run or are bound (a failed pod holds nothing). The
GPU-equivalents are nodes.figures', and `allocated_gpu_equivalents` counts every occupied
partition (a replica still starting too), so it equals the overview's allocation total.

`cluster_savings()` counts the same figures in SQL (what every page uses): a partition's share is
at most one GPU (share_milli <= 1000, a MIG profile at most 7/7), so an occupant holding a single
partition on a GPU counts one baseline GPU there, and only the (occupant, GPU) pairs with several
partitions (MIG instances or MPS slots of one pod on one GPU) are read row by row to add their
shares up. `cluster_occupants()` + `compute_savings` is the reference it is tested against.

The result is kept per telemetry poll and until the inventory or allocation changes
(nodes.fleet.cached_per_poll), so the API, the overview, the savings page and /metrics show
the same figures.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from fractions import Fraction

from django.conf import settings
from django.db.models import Case, CharField, Count, F, QuerySet, Sum, Value, When

from nodes.figures import gpu_equivalent
from nodes.fleet import cached_per_poll
from nodes.gpu_costs import gpu_prices
from nodes.holds import occupied_partition_filter, with_holder_id
from nodes.models import GPU, Partition
from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.choices import PlacementStatus
from scheduler.core.savings import GPUCost, Holding, ModelSavings, Occupant, Savings

# A replica holding its partitions but not serving: reserved, or its pod not (yet) ready.
NOT_RUNNING = (PlacementStatus.RESERVED, PlacementStatus.BINDING)


def _running(partitions: QuerySet[Partition]) -> QuerySet[Partition]:
    """Leave out the partitions held by a replica whose pod does not run (reserved or starting)."""
    return partitions.exclude(hold__placement__status__in=NOT_RUNNING)


def cluster_occupants() -> list[Occupant]:
    """Every running replica and foreign pod holding GPU capacity, with what it holds on each GPU."""
    holdings: dict[str, list[Holding]] = defaultdict(list)
    rows = with_holder_id(_running(Partition.objects.filter(occupied_partition_filter()))).values_list(
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


def _occupied_partitions() -> QuerySet[Partition]:
    """Occupied partitions of running occupants annotated with their occupant: `holder_id`, and
    `pod_key`, the pod only where no holder holds the partition (a held partition is its
    holder's, whatever pod)."""
    return with_holder_id(_running(Partition.objects.filter(occupied_partition_filter()))).annotate(
        pod_key=Case(When(holder_id__isnull=True, then=F("pod")), default=Value(""), output_field=CharField())
    ).order_by()


def cluster_savings(costs: dict[str, GPUCost]) -> Savings:
    """compute_savings(cluster_occupants(), costs), counted by the database: four aggregate
    queries, and a fifth reading the partitions of pairs of several partitions when there are any.
    Its allocation counts every occupied partition, a replica still starting too (the overview's)."""
    occupied = _occupied_partitions()
    baseline: Counter[str] = Counter()
    used: Counter[str] = Counter()
    for row in occupied.values("gpu__model").annotate(n=Count("id"), gpus=Count("gpu", distinct=True)):
        baseline[row["gpu__model"]] += row["n"]  # one per partition, corrected below for pairs of several
        used[row["gpu__model"]] += row["gpus"]
    several = occupied.values("holder_id", "pod_key", "gpu_id").annotate(n=Count("id")).filter(n__gt=1)
    pairs = {(row["holder_id"], row["pod_key"], row["gpu_id"]) for row in several}
    if pairs:
        shares: dict[tuple[object, str, int], Fraction] = defaultdict(Fraction)
        models: dict[tuple[object, str, int], str] = {}
        rows = occupied.filter(gpu_id__in={gpu_id for _, _, gpu_id in pairs}).values_list(
            "holder_id", "pod_key", "gpu_id", "gpu__model", "kind", "share_milli", "mig_profile"
        )
        counts: Counter[tuple[object, str, int]] = Counter()
        for holder_id, pod_key, gpu_id, model, kind, share_milli, mig_profile in rows:
            pair = (holder_id, pod_key, gpu_id)
            shares[pair] += gpu_equivalent(kind, share_milli, mig_profile)
            models[pair] = model
            counts[pair] += 1
        for pair in pairs:
            # ceil(share), at least 1 (as compute_savings), instead of one per partition.
            share = shares[pair]
            baseline[models[pair]] -= counts[pair] - max(1, -(-share.numerator // share.denominator))
    allocated = Partition.objects.filter(occupied_partition_filter()).order_by()  # starting replicas too
    equivalents = sum(
        (gpu_equivalent(row["kind"], row["share_milli"], row["mig_profile"]) * row["n"]
         for row in allocated.values("kind", "share_milli", "mig_profile").annotate(n=Count("id"))),
        Fraction(0),
    )
    # A GPU with something allocated but no partition rows: one occupant holding one GPU.
    unpartitioned = GPU.objects.filter(partitions__isnull=True).exclude(allocated_milli=0, allocated_memory_mib=0)
    for row in unpartitioned.values("model").annotate(n=Count("id"), milli=Sum("allocated_milli")).order_by():
        baseline[row["model"]] += row["n"]
        used[row["model"]] += row["n"]
        equivalents += Fraction(row["milli"] or 0, SHARE_MILLI_FULL)
    zero = GPUCost(0.0, 0.0)
    by_model = tuple(
        ModelSavings(model, baseline[model], used[model], costs.get(model, zero).usd_per_hour, costs.get(model, zero).power_w)
        for model in sorted(baseline)
    )
    return Savings(sum(baseline.values()), equivalents, sum(used.values()), by_model)


def gpu_costs() -> dict[str, GPUCost]:
    """Price and power of each catalog model, as the calculator takes them."""
    return {key: GPUCost(price.usd_per_hour, price.power_w) for key, price in gpu_prices().items()}


def _compute() -> Savings:
    return cluster_savings(gpu_costs())


def current_savings(*, refresh: bool = False) -> Savings:
    """The savings now: computed once per poll interval and inventory change, shared by every page
    (`refresh`: recompute now, nodes.fleet.refresh_per_poll)."""
    return cached_per_poll("savings", _compute, sorted(settings.GPU_PRICE_USD_PER_HOUR.items()), refresh=refresh)
