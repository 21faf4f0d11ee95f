"""The demo cluster: the seed's "4 H100 at 700 W, 80 GB; 8 A100 at 400 W, 40 GB", on the simulator.

Twelve nodes that show every sharing mode gpuplane manages, each reached the way an operator
reaches it on a real cluster (device-plugin ConfigMap entry + node label + plugin restart; a
mig-parted config + `nvidia.com/mig.config` label, then waiting for the MIG manager), with a few
workloads already running and most capacity left free for placements:

| node | GPUs | mode | already running |
|---|---|---|---|
| h100-node-1 | 8 | exclusive | a 4-GPU fine-tune, a 1-GPU server |
| h100-node-2 | 8 | exclusive | a 2-GPU server |
| h100-node-3 | 8 | MIG: GPUs 0-4 five different layouts, 5-7 whole | four MIG servers |
| h100-node-4 | 8 | time-slicing R=4 | three notebooks / CI jobs |
| a100-node-1 | 8 | MPS R=2 | two 50 % servers |
| a100-node-2 | 8 | MPS R=4 | four 25 % servers |
| a100-node-3 | 4 | MPS R=2 | one 50 % server |
| a100-node-4 | 4 | weighted MPS (time-slicing R=4 + gpuplane's daemon) | 50 % + 25 % on GPU 0 |
| a100-node-5 | 4 | MIG: 2x3g.20gb, 2x3g.20gb, 7x1g.5gb, 3x2g.10gb+1g.5gb | two MIG jobs |
| a100-node-6..8 | 4, 8, 8 | exclusive | a 2-GPU trainer, a 1-GPU server |

`load_demo_cluster` is what `manage.py load_demo_cluster` runs: it seeds the simulated cluster
named by the settings and syncs the inventory from it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from nodes.catalog import lookup_product
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import (
    ANNOTATION_MEMORY_MIB,
    LABEL_APP_NAME,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_MIG_CONFIG,
    LABEL_MIG_CONFIG_STATE,
    LABEL_SHARING_MODE,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
    SHARING_MODE_LABEL_WEIGHTED,
)
from nodes.holds import occupied_partition_filter, partition_holder
from nodes.inventory.report import SyncReport
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, InventoryWatch, Node, Partition
from nodes.sharing.device_plugin import device_plugin_config

H100_PRODUCT = "NVIDIA-H100-80GB-HBM3"
A100_PRODUCT = "NVIDIA-A100-SXM4-40GB"
# GFD's nvidia.com/gpu.memory for these boards (the catalog's figures, not the marketing size).
H100_MEMORY_MIB = lookup_product(H100_PRODUCT).memory_mib
A100_MEMORY_MIB = lookup_product(A100_PRODUCT).memory_mib

CONFIG_MPS_2 = "gpuplane-mps-2"
CONFIG_MPS_4 = "gpuplane-mps-4"
CONFIG_TIMESLICE_4 = "gpuplane-timeslice-4"
MIG_CONFIG_H100 = "gpuplane-demo-h100"
MIG_CONFIG_A100 = "gpuplane-demo-a100"

DEVICE_PLUGIN_CONFIGS: dict[str, dict[str, Any]] = {
    CONFIG_MPS_2: device_plugin_config("mps", 2),
    CONFIG_MPS_4: device_plugin_config("mps", 4),
    CONFIG_TIMESLICE_4: device_plugin_config("time-slicing", 4),
}
# One layout per GPU where it helps to show them side by side (docs/design.md section 4 geometry).
MIG_CONFIGS: dict[str, list[dict[str, Any]]] = {
    MIG_CONFIG_H100: [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": [2], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
        {"devices": [3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [4], "mig-enabled": True, "mig-devices": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
        {"devices": [5, 6, 7], "mig-enabled": False},
    ],
    MIG_CONFIG_A100: [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [3], "mig-enabled": True, "mig-devices": {"2g.10gb": 3, "1g.5gb": 1}},
    ],
}


@dataclass(frozen=True)
class DemoNode:
    name: str
    product: str
    gpu_count: int
    memory_mib: int
    device_plugin_config: str = ""
    mig_config: str = ""
    weighted: bool = False


@dataclass(frozen=True)
class DemoPod:
    namespace: str
    name: str
    node: str
    resources: dict[str, int]
    gpus: list[int] | None = None
    share_milli: int | None = None
    mig_start: int | None = None
    memory_mib: int | None = None  # declared GPU memory (time-slicing / weighted MPS accounting)


DEMO_NODES: tuple[DemoNode, ...] = (
    DemoNode("h100-node-1", H100_PRODUCT, 8, H100_MEMORY_MIB),
    DemoNode("h100-node-2", H100_PRODUCT, 8, H100_MEMORY_MIB),
    DemoNode("h100-node-3", H100_PRODUCT, 8, H100_MEMORY_MIB, mig_config=MIG_CONFIG_H100),
    DemoNode("h100-node-4", H100_PRODUCT, 8, H100_MEMORY_MIB, device_plugin_config=CONFIG_TIMESLICE_4),
    DemoNode("a100-node-1", A100_PRODUCT, 8, A100_MEMORY_MIB, device_plugin_config=CONFIG_MPS_2),
    DemoNode("a100-node-2", A100_PRODUCT, 8, A100_MEMORY_MIB, device_plugin_config=CONFIG_MPS_4),
    DemoNode("a100-node-3", A100_PRODUCT, 4, A100_MEMORY_MIB, device_plugin_config=CONFIG_MPS_2),
    DemoNode("a100-node-4", A100_PRODUCT, 4, A100_MEMORY_MIB, device_plugin_config=CONFIG_TIMESLICE_4, weighted=True),
    DemoNode("a100-node-5", A100_PRODUCT, 4, A100_MEMORY_MIB, mig_config=MIG_CONFIG_A100),
    DemoNode("a100-node-6", A100_PRODUCT, 4, A100_MEMORY_MIB),
    DemoNode("a100-node-7", A100_PRODUCT, 8, A100_MEMORY_MIB),
    DemoNode("a100-node-8", A100_PRODUCT, 8, A100_MEMORY_MIB),
)

_GPU = RESOURCE_GPU


def _mig(profile: str) -> dict[str, int]:
    return {f"{RESOURCE_MIG_PREFIX}{profile}": 1}


DEMO_PODS: tuple[DemoPod, ...] = (
    # Exclusive H100s: whole GPUs.
    DemoPod("training", "llama3-70b-finetune-0", "h100-node-1", {_GPU: 4}, gpus=[0, 1, 2, 3]),
    DemoPod("serving", "mixtral-8x7b-0", "h100-node-1", {_GPU: 1}, gpus=[4]),
    DemoPod("serving", "llama3-70b-0", "h100-node-2", {_GPU: 2}, gpus=[0, 1]),
    # MIG H100: instances pinned by their placement start (GPU 2 is 2g.20gb@0, 2g.20gb@2, 3g.40gb@4).
    DemoPod("serving", "llama3-8b-mig-0", "h100-node-3", _mig("3g.40gb"), gpus=[1], mig_start=0),
    DemoPod("serving", "mistral-7b-mig-0", "h100-node-3", _mig("2g.20gb"), gpus=[2], mig_start=2),
    DemoPod("serving", "whisper-large-0", "h100-node-3", _mig("1g.10gb"), gpus=[3], mig_start=0),
    DemoPod("serving", "bge-embed-0", "h100-node-3", _mig("1g.10gb"), gpus=[3], mig_start=1),
    # Time-sliced H100: replicas share compute; memory is what each declares.
    DemoPod("dev", "jupyter-alice-0", "h100-node-4", {_GPU: 1}, gpus=[0], memory_mib=16384),
    DemoPod("dev", "jupyter-bob-0", "h100-node-4", {_GPU: 1}, gpus=[0], memory_mib=12288),
    DemoPod("ci", "cuda-tests-0", "h100-node-4", {_GPU: 1}, gpus=[1], memory_mib=8192),
    # Uniform MPS: 50 % slots on R=2, 25 % slots on R=4.
    DemoPod("serving", "mistral-7b-0", "a100-node-1", {_GPU: 1}, gpus=[0]),
    DemoPod("serving", "mistral-7b-1", "a100-node-1", {_GPU: 1}, gpus=[1]),
    DemoPod("serving", "bert-large-0", "a100-node-2", {_GPU: 1}, gpus=[0]),
    DemoPod("serving", "bert-large-1", "a100-node-2", {_GPU: 1}, gpus=[0]),
    DemoPod("serving", "bert-large-2", "a100-node-2", {_GPU: 1}, gpus=[0]),
    DemoPod("serving", "t5-base-0", "a100-node-2", {_GPU: 1}, gpus=[1]),
    DemoPod("inference", "codellama-7b-0", "a100-node-3", {_GPU: 1}, gpus=[0]),
    # Weighted MPS: different shares on one GPU.
    DemoPod("serving", "llama3-8b-0", "a100-node-4", {_GPU: 1}, gpus=[0], share_milli=500, memory_mib=20480),
    DemoPod("serving", "phi3-mini-0", "a100-node-4", {_GPU: 1}, gpus=[0], share_milli=250, memory_mib=8192),
    # MIG A100.
    DemoPod("batch", "resnet50-train-0", "a100-node-5", _mig("3g.20gb"), gpus=[0], mig_start=0),
    DemoPod("batch", "yolo-eval-0", "a100-node-5", _mig("1g.5gb"), gpus=[2], mig_start=0),
    # Exclusive A100s.
    DemoPod("training", "bert-pretrain-0", "a100-node-6", {_GPU: 2}, gpus=[0, 1]),
    DemoPod("inference", "sdxl-0", "a100-node-7", {_GPU: 1}, gpus=[0]),
)


class DemoClusterError(Exception):
    """The demo cannot be loaded as asked; the message says why and what to do."""


def seed_demo_cluster(cluster: SimulatedCluster) -> None:
    """Build the demo on an empty simulated cluster, the way an operator would on a real one.

    Pass a cluster whose MIG manager and device plugin restarts finish at once (`mig_reconfigure_s=0,
    plugin_restart_s=0`) or on a clock you advance; this waits for every MIG node to report `success` and raises DemoClusterError when
    one does not (or when the cluster is not empty).
    """
    if not cluster.is_empty():
        raise DemoClusterError("the simulated cluster already has nodes; reset it first")
    for name, config in DEVICE_PLUGIN_CONFIGS.items():
        cluster.set_device_plugin_config(name, config)
    for name, entries in MIG_CONFIGS.items():
        cluster.set_mig_config(name, entries)

    for spec in DEMO_NODES:
        cluster.add_gpu_node(spec.name, product=spec.product, gpu_count=spec.gpu_count, gpu_memory_mib=spec.memory_mib)
        if spec.device_plugin_config:
            labels: dict[str, str | None] = {LABEL_DEVICE_PLUGIN_CONFIG: spec.device_plugin_config}
            if spec.weighted:
                # gpuplane's own MPS daemon runs on top of the plugin's time-slicing replicas.
                labels[LABEL_SHARING_MODE] = SHARING_MODE_LABEL_WEIGHTED
            cluster.set_node_labels(spec.name, labels)
            cluster.restart_device_plugin(spec.name)
        if spec.mig_config:
            cluster.set_node_labels(spec.name, {LABEL_MIG_CONFIG: spec.mig_config})
    _wait_for_mig(cluster)

    for pod in DEMO_PODS:
        cluster.run_pod(
            pod.namespace,
            pod.name,
            pod.node,
            resources=pod.resources,
            gpus=pod.gpus,
            share_milli=pod.share_milli,
            mig_start=pod.mig_start,
            annotations={ANNOTATION_MEMORY_MIB: str(pod.memory_mib)} if pod.memory_mib is not None else None,
            labels={LABEL_APP_NAME: pod.name.rsplit("-", 1)[0]},
            owner_kind="ReplicaSet",
        )


def _wait_for_mig(cluster: SimulatedCluster, attempts: int = 3) -> None:
    """Read the nodes until every MIG node's config state is final (the simulator is lazy)."""
    wanted = {spec.name for spec in DEMO_NODES if spec.mig_config}
    states: dict[str, str] = {}
    for _ in range(attempts):
        states = {
            node.name: node.labels.get(LABEL_MIG_CONFIG_STATE, "")
            for node in cluster.list_nodes()
            if node.name in wanted
        }
        if all(state in ("success", "failed") for state in states.values()):
            break
    not_applied = [f"{name}: {state or 'no state'}" for name, state in sorted(states.items()) if state != "success"]
    if not_applied:
        raise DemoClusterError(
            f"the MIG manager did not apply the demo layouts ({', '.join(not_applied)}); "
            "seed with SimulatedCluster(..., mig_reconfigure_s=0, plugin_restart_s=0)"
        )


@dataclass
class InventorySummary:
    """Counts that show what the inventory holds, for the command's output and the tests."""

    nodes: int = 0
    gpus: int = 0
    nodes_by_model: dict[str, int] = field(default_factory=dict)
    nodes_by_mode: dict[str, int] = field(default_factory=dict)
    partitions_by_kind: dict[str, int] = field(default_factory=dict)
    occupied_by_kind: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        def join(counts: dict[str, int]) -> str:
            return ", ".join(f"{key or 'unknown'} {count}" for key, count in sorted(counts.items())) or "none"

        kinds = sorted(self.partitions_by_kind)
        return [
            f"nodes: {self.nodes} ({join(self.nodes_by_model)})",
            f"sharing modes: {join(self.nodes_by_mode)}",
            f"GPUs: {self.gpus}",
            "partitions (occupied/total): "
            + (", ".join(f"{kind} {self.occupied_by_kind.get(kind, 0)}/{self.partitions_by_kind[kind]}" for kind in kinds) or "none"),
        ]


def summarize_inventory() -> InventorySummary:
    """Count the inventory rows by model, sharing mode and partition kind."""
    kinds = Partition.objects.values_list("kind", flat=True)
    return InventorySummary(
        nodes=Node.objects.count(),
        gpus=GPU.objects.count(),
        nodes_by_model=dict(Counter(Node.objects.values_list("gpu_model", flat=True))),
        nodes_by_mode=dict(Counter(Node.objects.values_list("sharing_mode", flat=True))),
        partitions_by_kind=dict(Counter(kinds)),
        occupied_by_kind=dict(Counter(kinds.filter(occupied_partition_filter()))),
    )


@dataclass
class DemoOutcome:
    """What load_demo_cluster did."""

    skipped: bool  # --if-empty found inventory rows and did nothing
    seeded: bool  # the simulated cluster was (re)built
    report: SyncReport | None
    summary: InventorySummary


def load_demo_cluster(*, if_empty: bool = False, reset: bool = False, force: bool = False) -> DemoOutcome:
    """Seed the simulated cluster with the demo and sync the inventory from it.

    - Refused (DemoClusterError) when settings.GPUPLANE_CLUSTER is "kubernetes": the demo never
      touches a real cluster.
    - `if_empty`: do nothing when Node rows exist; when the inventory is empty but the simulated
      cluster is not, only sync from it.
    - `reset`: first delete every inventory row and empty the simulated cluster; refused when
      placements exist unless `force`, which deletes those placements too.
    - Otherwise the simulated cluster must be empty (else DemoClusterError suggests --reset).
    """
    if settings.GPUPLANE_CLUSTER == "kubernetes":
        raise DemoClusterError(
            "GPUPLANE_CLUSTER is 'kubernetes': the demo only seeds the simulated cluster and will not "
            "touch a real one. Unset GPUPLANE_CLUSTER (or set it to 'simulated') to load the demo."
        )
    # The MIG manager and plugin restarts finish at once so that the layouts and configs are in
    # place before the first sync.
    cluster = SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, mig_reconfigure_s=0, plugin_restart_s=0)
    if reset:
        wipe_inventory(force=force)
        cluster.reset()
    elif if_empty and Node.objects.exists():
        return DemoOutcome(skipped=True, seeded=False, report=None, summary=summarize_inventory())

    seeded = False
    if cluster.is_empty():
        seed_demo_cluster(cluster)
        seeded = True
    elif not if_empty:
        raise DemoClusterError(
            f"the simulated cluster in {settings.GPUPLANE_SIMULATED_STATE} already has nodes; "
            "pass --reset to rebuild the demo or --if-empty to load it only into an empty inventory"
        )
    report = sync_inventory(cluster, relist=True)  # the rows may be anything (an emptied inventory): compare all
    return DemoOutcome(skipped=False, seeded=seeded, report=report, summary=summarize_inventory())


def wipe_inventory(*, force: bool) -> None:
    """Delete every Node row (GPUs and partitions go with them); DemoClusterError when placements
    exist, unless `force`, which deletes those placements too."""
    # Asked through the holder hook: the inventory app does not import the scheduler (it depends on us).
    holder = partition_holder()
    with transaction.atomic():
        holders = holder.count_holders()
        if holders and not force:
            raise DemoClusterError(
                f"{holders} placement(s) exist; --reset would delete the nodes they run on. "
                "Release them first, or add --force to delete them too."
            )
        holder.forget_all()
        Node.objects.all().delete()
        InventoryWatch.objects.all().delete()  # the rows are in sync with no cluster version any more


__all__ = [
    "DEMO_NODES",
    "DEMO_PODS",
    "DemoClusterError",
    "DemoOutcome",
    "InventorySummary",
    "load_demo_cluster",
    "seed_demo_cluster",
    "summarize_inventory",
    "wipe_inventory",
]
