"""Hand-built cluster states for the placement core tests (no database).

``demo_nodes`` resembles the seed's demo cluster: 4 H100-80GB nodes (exclusive) and 8
A100-40GB nodes covering every sharing mode, each node with 2 GPUs and a hostname label:

| node    | mode          | R |
|---------|---------------|---|
| h100-1..4 | exclusive   | 1 |
| a100-1  | mps           | 2 |
| a100-2  | mps           | 2 |
| a100-3  | mps           | 4 |
| a100-4  | mps           | 4 |
| a100-5  | mps-weighted  | 4 |
| a100-6  | mps-weighted  | 4 |
| a100-7  | timeslice     | 4 |
| a100-8  | mig (3g.20gb + 2g.10gb + 1g.10gb on both GPUs) | 1 |
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from nodes.vocabulary import PartitionKind, SharingMode, Taint
from scheduler.core import ClusterSnapshot, NodeState, PartitionState, PlacementRequest, new_gpus
from scheduler.core.fit import build_need
from scheduler.core.framework import CycleState, FilterPlugin, PreFilterPlugin, PreScorePlugin, ScorePlugin

H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-40GB"
DEMO_MIG_LAYOUT = {"3g.20gb": 1, "2g.10gb": 1, "1g.10gb": 1}
HOSTNAME = "kubernetes.io/hostname"
GIB = 1024


def make_node(
    name: str,
    model: str = A100,
    mode: SharingMode | str = SharingMode.EXCLUSIVE,
    replicas: int = 1,
    gpus: int = 2,
    *,
    util: float | None = None,
    memory_used_pct: float | None = None,
    mig: Mapping[str, int] | None = None,
    mig_gpus: int | None = None,
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
    cordoned: bool = False,
) -> NodeState:
    """A node of ``gpus`` empty GPUs; ``util`` / ``memory_used_pct`` set every GPU's telemetry."""
    states = new_gpus(model, gpus, mig_layout=mig, mig_gpus=mig_gpus)
    for gpu in states:
        gpu.utilization_pct = util
        if memory_used_pct is not None:
            gpu.memory_used_mib = int(gpu.memory_mib * memory_used_pct / 100)
    return NodeState(
        name=name,
        gpu_model=model,
        sharing_mode=SharingMode(mode),
        sharing_replicas=replicas,
        gpus=states,
        labels={HOSTNAME: name, **(labels or {})},
        taints=taints,
        ready=ready,
        cordoned=cordoned,
    )


def occupy(node: NodeState, gpu: int, share_milli: int, memory_mib: int, occupant: str,
           kind: PartitionKind | None = None) -> None:
    """Put an existing occupant on a non-MIG GPU (as inventory sync would find it)."""
    target = node.gpus[gpu]
    slot = len([p for p in target.partitions if p.occupant])
    target.partitions.append(
        PartitionState(kind=kind or PartitionKind(str(node.sharing_mode)), slot=slot, share_milli=share_milli,
                       memory_mib=memory_mib, occupant=occupant)
    )


def demo_nodes(h100_util: float | None = None, a100_util: Mapping[str, float] | float | None = None) -> list[NodeState]:
    """The demo-like cluster of the module docstring, optionally with utilization."""
    nodes = [make_node(f"h100-{i}", H100, util=h100_util) for i in range(1, 5)]
    modes = [
        (SharingMode.MPS, 2), (SharingMode.MPS, 2), (SharingMode.MPS, 4), (SharingMode.MPS, 4),
        (SharingMode.MPS_WEIGHTED, 4), (SharingMode.MPS_WEIGHTED, 4), (SharingMode.TIMESLICE, 4),
        (SharingMode.MIG, 1),
    ]
    for i, (mode, replicas) in enumerate(modes, start=1):
        name = f"a100-{i}"
        util = a100_util.get(name) if isinstance(a100_util, Mapping) else a100_util
        nodes.append(make_node(name, A100, mode, replicas, util=util,
                               mig=DEMO_MIG_LAYOUT if mode == SharingMode.MIG else None))
    return nodes


def demo_snapshot(**kwargs: object) -> ClusterSnapshot:
    return ClusterSnapshot(demo_nodes(**kwargs))  # type: ignore[arg-type]


def request(memory_gib: float = 8, key: str = "team/app#0", **kwargs: object) -> PlacementRequest:
    return PlacementRequest(key=key, memory_mib=int(memory_gib * GIB), **kwargs)  # type: ignore[arg-type]


def cycle(snapshot: ClusterSnapshot, req: PlacementRequest, *plugins: object) -> CycleState:
    """A cycle state with the PreFilter of each given plugin run (as the framework would)."""
    state = CycleState(req, build_need(req), snapshot)
    for plugin in plugins:
        if isinstance(plugin, PreFilterPlugin):
            status = plugin.pre_filter(state)
            assert status.ok, status
    return state


def filter_codes(plugin: FilterPlugin, snapshot: ClusterSnapshot, req: PlacementRequest) -> dict[str, int]:
    """Node name -> the filter's reason code (0 = passes), over every node."""
    state = cycle(snapshot, req, plugin)
    codes = plugin.filter(state, np.arange(len(snapshot)))
    return {name: int(code) for name, code in zip(snapshot.names, codes, strict=True)}


def filter_reasons(plugin: FilterPlugin, snapshot: ClusterSnapshot, req: PlacementRequest) -> dict[str, str]:
    """Node name -> the filter's reason phrase ("" = passes)."""
    return {name: plugin.reasons[code - 1] if code else "" for name, code in
            filter_codes(plugin, snapshot, req).items()}


def scores(plugin: ScorePlugin, snapshot: ClusterSnapshot, req: PlacementRequest,
           names: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """Node name -> (raw, normalized) for ``names`` (default: every node) as the feasible set."""
    state = cycle(snapshot, req, plugin)
    wanted = names if names is not None else snapshot.names
    nodes = np.array([snapshot.index[name] for name in wanted], dtype=np.int64)
    if isinstance(plugin, PreScorePlugin):
        plugin.pre_score(state, nodes)
    raw = np.asarray(plugin.score(state, nodes))
    normalized = np.asarray(plugin.normalize(state, raw))
    return {name: (int(r), int(n)) for name, r, n in zip(wanted, raw, normalized, strict=True)}
