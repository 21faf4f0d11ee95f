"""The rolling-update planner: which nodes change config in which batch, and what must move first.

Pure Python (docs/design.md section 5, step 1). Given the cluster's nodes (their workloads, capacity
and current sharing config), the names of the nodes to change, the target config and
``max_unavailable``, it gives:

- the nodes to skip, each with a reason: already at the target config, or holding a workload
  marked do-not-disrupt (gpuplane never evicts one, so the node cannot be drained);
- batches of at most ``max_unavailable`` nodes, in a stable order: nodes with fewer workloads to
  move first (an empty node proves the new config before anything has to move), then by name;
- per node, the workloads to re-place elsewhere before it is drained, and where they go;
- per batch, the capacity dip: the capacity of the batch's nodes, out of the cluster's total;
- a refusal per workload that the rest of the cluster cannot hold at that point.

Configs are opaque values compared with ``==`` (the service layer passes
``nodes.sharing.node_config.NodeConfig``), so the core needs no knowledge of NVIDIA's formats.
Capacity is in milli-GPUs (thousandths of a GPU, like ``share_milli``). Where a workload goes is
decided by a ``Placer``: the default is best fit on free milli-GPUs; the service layer can plug
in the placement engine.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

SKIP_AT_TARGET = "already at the target config"
SKIP_DO_NOT_DISRUPT = "holds do-not-disrupt workload {workloads}: gpuplane never evicts it, so the node cannot be drained"


@dataclass(frozen=True)
class RolloutWorkload:
    """One workload pod that must leave a node before the node is drained (never a DaemonSet pod:
    those stay, the eviction skips them, so the caller leaves them out)."""

    key: str  # stable identity: "namespace/pod" or a placement id
    size_milli: int  # GPU capacity it holds, in thousandths of a GPU
    do_not_disrupt: bool = False


@dataclass(frozen=True)
class RolloutNode:
    """A node of the cluster as the planner sees it.

    ``capacity_after_milli`` is what the node offers once at the target config (None: the same);
    unschedulable nodes (cordoned, not ready) never receive moved workloads.
    """

    name: str
    config: Hashable
    capacity_milli: int
    workloads: tuple[RolloutWorkload, ...] = ()
    schedulable: bool = True
    capacity_after_milli: int | None = None

    @property
    def used_milli(self) -> int:
        return sum(w.size_milli for w in self.workloads)


class NoRoom(Exception):
    """Raised by a placer that cannot place a workload; its message is the reason the plan shows."""


# (workload, free milli-GPUs per candidate node in preference order) -> the chosen node's name, or
# None (or NoRoom) when none can hold it. A placer must choose among the candidates it is given.
Placer = Callable[[RolloutWorkload, Mapping[str, int]], "str | None"]


def best_fit(workload: RolloutWorkload, free: Mapping[str, int]) -> str | None:
    """The candidate with the least free capacity that still holds the workload (ties: the earlier
    candidate), so big holes stay open for big workloads."""
    need = workload.size_milli
    best: str | None = None
    best_room = 0
    for name, room in free.items():
        # Strictly less: on a tie the earlier candidate stays.
        if room >= need and (best is None or room < best_room):
            best, best_room = name, room
    return best


@dataclass(frozen=True)
class Move:
    """A workload to re-place (pre-warm) before its node is drained."""

    workload: str
    size_milli: int
    source: str
    destination: str


@dataclass(frozen=True)
class Refusal:
    """A workload the rest of the cluster cannot hold when its node's turn comes."""

    workload: str
    node: str
    reason: str


@dataclass(frozen=True)
class SkippedNode:
    node: str
    reason: str


@dataclass(frozen=True)
class NodeStep:
    """One node's change: from ``current`` to the target, after its ``moves`` are done."""

    node: str
    current: Hashable
    moves: tuple[Move, ...]
    refusals: tuple[Refusal, ...]
    capacity_milli: int


@dataclass(frozen=True)
class Batch:
    """Nodes changed together; ``capacity_dip_milli`` is out of service while they are."""

    index: int  # 1-based
    steps: tuple[NodeStep, ...]
    capacity_dip_milli: int
    total_capacity_milli: int

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(step.node for step in self.steps)

    @property
    def capacity_dip_percent(self) -> float:
        return 100.0 * self.capacity_dip_milli / self.total_capacity_milli if self.total_capacity_milli else 0.0


@dataclass(frozen=True)
class RolloutPlan:
    target: Hashable
    max_unavailable: int
    batches: tuple[Batch, ...]
    skipped: tuple[SkippedNode, ...]
    refusals: tuple[Refusal, ...] = field(default=())

    @property
    def feasible(self) -> bool:
        """True when every workload that must move has somewhere to go."""
        return not self.refusals

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(move for batch in self.batches for step in batch.steps for move in step.moves)

    def explain(self) -> list[str]:
        """The plan in sentences, for a preview or the audit log."""
        lines = [f"{s.node}: skipped, {s.reason}" for s in self.skipped]
        for batch in self.batches:
            lines.append(
                f"batch {batch.index}: {', '.join(batch.nodes)} "
                f"({_gpus(batch.capacity_dip_milli)} GPU out of service, {batch.capacity_dip_percent:.1f} % of capacity)"
            )
            for step in batch.steps:
                lines.extend(
                    f"  {m.workload} moves from {m.source} to {m.destination} before {m.source} is drained"
                    for m in step.moves
                )
                lines.extend(f"  {r.workload} on {r.node} cannot move: {r.reason}" for r in step.refusals)
        return lines


def plan_rollout(
    cluster: Sequence[RolloutNode],
    targets: Iterable[str],
    target: Hashable,
    max_unavailable: int,
    placer: Placer = best_fit,
) -> RolloutPlan:
    """Plan changing the ``targets`` nodes of ``cluster`` to ``target``; see the module docstring.

    Moved workloads go first to nodes that will not change again (not targets, already changed,
    or skipped), and only if none can hold them to a target still waiting its turn (whose own
    step then moves them again). Raises ``ValueError`` for ``max_unavailable < 1``, duplicate
    node names or targets, or a target not in ``cluster``.
    """
    if max_unavailable < 1:
        raise ValueError(f"max_unavailable must be at least 1, not {max_unavailable}")
    by_name = {node.name: node for node in cluster}
    if len(by_name) != len(cluster):
        raise ValueError("node names in the cluster must be unique")
    target_names = list(targets)
    if len(set(target_names)) != len(target_names):
        raise ValueError("a node is named twice in the targets")
    unknown = sorted(set(target_names) - set(by_name))
    if unknown:
        raise ValueError(f"unknown target node{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")

    skipped: list[SkippedNode] = []
    pending: list[RolloutNode] = []
    for name in sorted(target_names):
        node = by_name[name]
        blockers = sorted(w.key for w in node.workloads if w.do_not_disrupt)
        if node.config == target:
            skipped.append(SkippedNode(name, SKIP_AT_TARGET))
        elif blockers:
            skipped.append(SkippedNode(name, SKIP_DO_NOT_DISRUPT.format(workloads=", ".join(blockers))))
        else:
            pending.append(node)
    pending.sort(key=lambda node: (len(node.workloads), node.name))

    state = _ClusterState(cluster)
    total = sum(node.capacity_milli for node in cluster if node.schedulable)
    batches: list[Batch] = []
    refusals: list[Refusal] = []
    waiting = {node.name for node in pending}
    for start in range(0, len(pending), max_unavailable):
        group = pending[start : start + max_unavailable]
        in_batch = {node.name for node in group}
        waiting -= in_batch
        state.open_batch(in_batch, waiting)
        steps = [state.evacuate(node, placer) for node in group]
        for step in steps:
            refusals.extend(step.refusals)
        state.finish(group)
        batches.append(
            Batch(len(batches) + 1, tuple(steps), sum(node.capacity_milli for node in group), total)
        )
    return RolloutPlan(target, max_unavailable, tuple(batches), tuple(skipped), tuple(refusals))


class _ClusterState:
    """Where each workload is as the plan goes on, and the free capacity that leaves."""

    def __init__(self, cluster: Sequence[RolloutNode]) -> None:
        self.capacity = {node.name: node.capacity_milli for node in cluster}
        self.resident: dict[str, list[RolloutWorkload]] = {node.name: list(node.workloads) for node in cluster}
        # Kept as moves happen, so a placement costs one pass over the hosts, not over every workload.
        self.used = {node.name: node.used_milli for node in cluster}
        self.hosts = sorted(node.name for node in cluster if node.schedulable)
        self.settled: dict[str, int] = {}
        self.later: dict[str, int] = {}

    def open_batch(self, in_batch: set[str], waiting: set[str]) -> None:
        """The batch's candidate hosts, free capacity per host, in name order: those that will not
        change again, then the targets still waiting their turn. Updated as moves happen."""
        hosts = [name for name in self.hosts if name not in in_batch]
        self.settled = {name: self.free(name) for name in hosts if name not in waiting}
        self.later = {name: self.free(name) for name in hosts if name in waiting}

    def free(self, name: str) -> int:
        return self.capacity[name] - self.used[name]

    def evacuate(self, node: RolloutNode, placer: Placer) -> NodeStep:
        # Biggest first: they are the hardest to place, and the order stays stable by key.
        leaving = sorted(self.resident[node.name], key=lambda w: (-w.size_milli, w.key))
        moves: list[Move] = []
        refusals: list[Refusal] = []
        for workload in leaving:
            destination, reason = self._place(workload, placer)
            if destination is None:
                refusals.append(Refusal(workload.key, node.name, reason))
                continue
            self.resident[node.name].remove(workload)
            self.resident[destination].append(workload)
            self.used[node.name] -= workload.size_milli
            self.used[destination] += workload.size_milli
            candidates = self.settled if destination in self.settled else self.later
            candidates[destination] -= workload.size_milli
            moves.append(Move(workload.key, workload.size_milli, node.name, destination))
        return NodeStep(node.name, node.config, tuple(moves), tuple(refusals), node.capacity_milli)

    def finish(self, group: Sequence[RolloutNode]) -> None:
        for node in group:
            if node.capacity_after_milli is not None:
                self.capacity[node.name] = node.capacity_after_milli

    def _place(self, workload: RolloutWorkload, placer: Placer) -> tuple[str | None, str]:
        settled, later = self.settled, self.later
        reason = ""
        for candidates in (settled, later):
            if not candidates:
                continue
            try:
                chosen = placer(workload, MappingProxyType(candidates))
            except NoRoom as exc:
                reason = str(exc)
                continue
            if chosen is not None:
                if chosen not in candidates:
                    raise ValueError(f"placer chose {chosen!r}, which is not a candidate for {workload.key}")
                return chosen, ""
        room = {**settled, **later}
        if not reason:
            if room:
                best = max(sorted(room), key=lambda name: room[name])
                reason = (
                    f"needs {_gpus(workload.size_milli)} GPU; the most any other schedulable node has free "
                    f"is {_gpus(max(room[best], 0))} on {best}"
                )
            else:
                reason = "no other schedulable node"
        return None, reason


def _gpus(milli: int) -> str:
    return f"{milli / 1000:g}"
