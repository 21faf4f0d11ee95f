"""What a node's page says about its sharing set-up and its usage, worded per sharing mode.

One vocabulary does not fit every mode: a weighted-MPS node runs the device plugin's
time-slicing config under gpuplane's MPS daemon, its "replicas" bound the pods per GPU rather
than cut the GPU, and its shares exist only once handed out, so "2 / 2 partitions used" would
read as a full node. Each fact is therefore labelled for the node's mode, and partitions are
counted per kind (never whole GPUs, MIG instances and replicas added up as equal units).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodes.models import Node
from nodes.vocabulary import PartitionKind, SharingMode

_IN_USE_LABELS: dict[str, str] = {
    PartitionKind.EXCLUSIVE: "Whole GPUs in use",
    PartitionKind.MIG: "MIG instances in use",
    PartitionKind.MPS: "MPS slots in use",
    PartitionKind.MPS_WEIGHTED: "Weighted MPS shares handed out",
    PartitionKind.TIMESLICE: "Time-slice replicas in use",
}


@dataclass(frozen=True)
class Fact:
    """One line of a definition list: a label, a value and, when the value needs it, why."""

    label: str
    value: str
    note: str = ""


def config_fact(node: Node) -> Fact:
    """The config gpuplane reads on the node, named for what it is (mig-parted or device plugin)."""
    if node.sharing_mode == SharingMode.MIG:
        return Fact("Applied MIG config", node.applied_config)
    note = ""
    if node.sharing_mode == SharingMode.MPS_WEIGHTED:
        note = (
            f"The device plugin's time-slicing config admits up to {node.sharing_replicas} pods per GPU; "
            "gpuplane's MPS daemon then gives each its own compute share and memory limit."
        )
    return Fact("Applied device-plugin config", node.applied_config, note)


def replicas_fact(node: Node) -> Fact | None:
    """What R means on this node, or None where there is no R (whole GPUs, MIG)."""
    replicas = node.sharing_replicas
    if node.sharing_mode == SharingMode.MPS:
        return Fact("MPS clients per GPU", str(replicas), f"each gets 1/{replicas} of the GPU's compute and memory")
    if node.sharing_mode == SharingMode.TIMESLICE:
        return Fact("Replicas per GPU", str(replicas), "replicas take turns on the whole GPU")
    if node.sharing_mode == SharingMode.MPS_WEIGHTED:
        return Fact("Pods per GPU", f"up to {replicas}", "compute and memory go by each pod's share, not by 1/R")
    return None


def partition_facts(partitions: Sequence[tuple[str, bool]]) -> list[Fact]:
    """Partitions in use per kind, as `(kind, occupied)` pairs: "3 / 32" for each kind present;
    weighted MPS shares as a bare count, since they exist only once handed out."""
    facts = []
    for kind in PartitionKind:
        of_kind = [occupied for k, occupied in partitions if k == kind]
        if not of_kind:
            continue
        used = sum(of_kind)
        value = str(used) if kind == PartitionKind.MPS_WEIGHTED else f"{used} / {len(of_kind)}"
        facts.append(Fact(_IN_USE_LABELS[kind], value))
    return facts
