"""A simulated fleet of N GPU nodes, loaded fast: what fleet-scale benchmarks and `load_fleet` run on.

The nodes go into the simulated cluster in one state transaction (`SimulatedCluster.add_gpu_nodes`)
and into the database by inventory sync itself, whose writes are bulk inserts: the rows are
exactly what the beat's sync would make, so a later sync changes nothing. Every node is an
exclusive-mode node (the device plugin's default config) of one catalog model, the models
interleaved by weight so that any prefix of the fleet has the mix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from django.conf import settings

from nodes.catalog import UnknownGPUModel, find_model
from nodes.cluster.sim import SimulatedCluster
from nodes.demo import DemoClusterError, InventorySummary, summarize_inventory, wipe_inventory
from nodes.inventory.report import SyncReport
from nodes.inventory.sync import sync_inventory
from nodes.models import Node

DEFAULT_MODELS = "H100-SXM5-80GB=1"


class FleetError(Exception):
    """The fleet cannot be loaded as asked; the message says why and what to do."""


@dataclass(frozen=True)
class FleetOutcome:
    report: SyncReport
    summary: InventorySummary


def parse_models(text: str) -> list[tuple[str, int]]:
    """`"H100-SXM5-80GB=3,A100-SXM4-40GB=1"` -> [(key, weight), ...]; a key without `=` weighs 1.

    FleetError for an unknown catalog key, a weight that is not a whole number >= 1, or nothing.
    """
    mix: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, _, weight = item.partition("=")
        try:
            find_model(key.strip())
        except UnknownGPUModel as exc:
            raise FleetError(str(exc)) from None
        if weight and (not weight.strip().isdigit() or int(weight) < 1):
            raise FleetError(f"{item!r}: the weight after '=' must be a whole number >= 1")
        mix.append((key.strip(), int(weight) if weight else 1))
    if not mix:
        raise FleetError("name at least one GPU model (catalog keys, e.g. H100-SXM5-80GB=3,A100-SXM4-40GB=1)")
    return mix


def model_sequence(mix: list[tuple[str, int]], count: int) -> list[str]:
    """The model of each of `count` nodes: weights spread evenly (smooth weighted round-robin)."""
    total = sum(weight for _, weight in mix)
    credit = [0] * len(mix)
    sequence: list[str] = []
    for _ in range(count):
        for position, (_, weight) in enumerate(mix):
            credit[position] += weight
        best = max(range(len(mix)), key=lambda position: credit[position])
        credit[best] -= total
        sequence.append(mix[best][0])
    return sequence


def fleet_nodes(count: int, gpus_per_node: int, mix: list[tuple[str, int]]) -> list[dict[str, object]]:
    """`add_gpu_nodes` arguments for `count` nodes named `fleet-<model>-<n>` (zero-padded, so they sort)."""
    width = max(5, int(math.log10(max(count, 1))) + 1)
    nodes: list[dict[str, object]] = []
    for number, key in enumerate(model_sequence(mix, count), start=1):
        model = find_model(key)
        nodes.append({
            "name": f"fleet-{key.lower()}-{number:0{width}d}",
            "product": model.gfd_products[0],
            "gpu_count": gpus_per_node,
            "gpu_memory_mib": model.memory_mib,
        })
    return nodes


def load_fleet(count: int, *, gpus_per_node: int = 8, models: str = DEFAULT_MODELS, replace: bool = False,
               force: bool = False) -> FleetOutcome:
    """Load `count` simulated nodes into the simulated cluster and the inventory; return what sync wrote.

    Refused (FleetError) with GPUPLANE_CLUSTER=kubernetes, and when the simulated cluster or the
    inventory already has nodes, unless `replace`: then both are emptied first (refused when
    placements exist, unless `force`, which deletes them too).
    """
    if settings.GPUPLANE_CLUSTER == "kubernetes":
        raise FleetError("GPUPLANE_CLUSTER is 'kubernetes': load_fleet only loads the simulated cluster")
    if count < 1 or gpus_per_node < 1:
        raise FleetError("the fleet needs at least one node of at least one GPU")
    mix = parse_models(models)
    cluster = SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, mig_reconfigure_s=0, plugin_restart_s=0)
    if replace:
        try:
            wipe_inventory(force=force)
        except DemoClusterError as exc:
            raise FleetError(str(exc)) from None
        cluster.reset()
    elif not cluster.is_empty() or Node.objects.exists():
        raise FleetError("the simulated cluster or the inventory already has nodes; pass --replace to start over")
    cluster.add_gpu_nodes(fleet_nodes(count, gpus_per_node, mix))
    report = sync_inventory(cluster, relist=True)
    return FleetOutcome(report=report, summary=summarize_inventory())


__all__ = ["DEFAULT_MODELS", "FleetError", "FleetOutcome", "fleet_nodes", "load_fleet", "model_sequence",
           "parse_models"]
