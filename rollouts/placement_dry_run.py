"""Where the placement engine would pre-warm each workload a rollout moves: a dry run, nothing written.

Execution pre-warms through ``scheduler.services.placing.place_replicas``: a fresh snapshot
(``scheduler.adapters.build_snapshot``), the configured profile (``placement_scheduler``) and
``deciding.decide`` for one new replica of the deployment. ``place_moves`` makes the same calls
on one snapshot held in memory, and replays on it what the rollout will have done by each
decision, in the order the reconciler works:

- batch after batch; within a batch the nodes by name (``reconciler.advance_rollout``), each
  node's replicas by placement id (``steps._prewarm``);
- every node of the batch cordoned as the batch pre-warms (``steps.cordon_batch``), so no copy
  goes to a sibling about to be drained;
- a node whose drain a pod blocks (``skipped_at_turn``) is uncordoned again at its turn,
  nothing placed for it (``steps._check_disruptable`` runs before any copy is placed);
- each copy's reservation stays on the snapshot (the next decision sees it), and charged to its
  namespace's quota; the old replicas keep their capacity (they are released only by the drain);
- a copy placed on a later batch's node is moved again when that node drains (issue 18: batch 1
  moved a workload onto batch 2's node, and batch 2 then had nowhere to put it);
- once a batch is done its nodes are empty, uncordoned and at the target config (GPUs as the
  device plugin or the MIG manager will offer them), ready to take the next batch's copies; a
  node with a workload the engine places nowhere is not changed (its step waits for room, times
  out and restores it): it keeps its replicas, its copies are given up, it is uncordoned.

Telemetry of a reconfigured node is unknown (no sample): its workloads are gone. A namespace
quota is charged for the copies but not given back by the drains (the preview errs on the side
of refusing). With ``move_back``, copies are assumed to stay where they were pre-warmed.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from nodes.catalog import find_model
from nodes.mig import plan_layout
from nodes.sharing.node_config import NodeConfig
from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.adapters import FreeRow, InventorySnapshot, build_snapshot, namespace_quota
from scheduler.choices import DecisionOutcome, PlacementStatus
from scheduler.core import QuotaUsage, Scheduler
from scheduler.core.advice import charge
from scheduler.core.types import Assignment, GPUState, NodeState, PartitionState, mig_share_milli
from scheduler.models import Placement
from scheduler.services.deciding import decide, placement_scheduler
from scheduler.services.errors import NoCapacity
from scheduler.services.placing import next_replica_index
from scheduler.services.spec import DeploySpec, spec_of

ACTIVE_PLACEMENTS = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)
HANDED_OVER = "handed to the default Kubernetes scheduler (no node chosen)"


@dataclass(frozen=True)
class EngineMove:
    """One workload's copy as the engine would place it before ``source`` is drained.

    ``destination`` is None when the engine refused it (``reason`` is its answer, the create's
    409) or handed it to the default scheduler (``outcome``); ``gpus`` and ``partition`` say
    where on the node.
    """

    workload: str
    size_milli: int
    source: str
    outcome: str
    destination: str | None = None
    gpus: tuple[int, ...] = ()
    partition: str = ""
    reason: str = ""

    @property
    def refused(self) -> bool:
        return self.outcome == DecisionOutcome.UNSCHEDULABLE

    def as_dict(self) -> dict[str, object]:
        return {"workload": self.workload, "size_milli": self.size_milli, "source": self.source,
                "destination": self.destination or "", "outcome": self.outcome, "gpus": list(self.gpus),
                "partition": self.partition, "reason": self.reason}


def workload_key(placement: Placement) -> str:
    """How the preview names a replica: "namespace/workload" (the planner's workload key too)."""
    deployment = placement.deployment
    name = placement.workload_name or f"{deployment.name}-{deployment.pk}-r{placement.replica_index}"
    return f"{deployment.namespace}/{name}"


def place_moves(batches: Sequence[Sequence[str]], target: NodeConfig, *,
                skipped_at_turn: Collection[str] = ()) -> list[EngineMove]:
    """Each copy the rollout's pre-warming would place, batch by batch (see the module docstring)."""
    run = _DryRun(build_snapshot(), placement_scheduler())
    moves: list[EngineMove] = []
    for batch in batches:
        cordoned_before = {name: run.node(name).cordoned for name in batch}
        for name in batch:
            run.set_cordoned(name, True)
        placed: dict[str, list[tuple[str, str]]] = {}
        for name in sorted(batch):
            if name in skipped_at_turn:
                run.set_cordoned(name, cordoned_before[name])  # restored, untouched
                continue
            placed[name] = []
            for move, held in run.move_off(name):
                moves.append(move)
                if held:
                    placed[name].append(held)
        for name, copies in placed.items():
            if any(m.refused for m in moves if m.source == name):
                # The step waits for room, times out and restores the node: its copies are given up.
                for node, key in copies:
                    run.snapshot.release(node, key)
                run.set_cordoned(name, cordoned_before[name])
            else:
                run.reconfigure(name, target)
    return moves


class _DryRun:
    def __init__(self, inventory: InventorySnapshot, scheduler: Scheduler) -> None:
        self.inventory = inventory
        self.snapshot = inventory.snapshot
        self.scheduler = scheduler
        self.specs: dict[int, DeploySpec] = {}
        self.next_index: dict[int, int] = {}
        self.quotas: dict[str, QuotaUsage | None] = {}
        # Node -> the replicas (by their original placement) whose copies this dry run put there.
        self.arrived: dict[str, list[Placement]] = {}

    def node(self, name: str) -> NodeState:
        return self.snapshot.nodes[self.snapshot.index[name]]

    def set_cordoned(self, name: str, cordoned: bool) -> None:
        if name in self.snapshot.index and self.node(name).cordoned != cordoned:
            self.snapshot.update_node(replace(self.node(name), cordoned=cordoned))

    def move_off(self, name: str) -> list[tuple[EngineMove, tuple[str, str] | None]]:
        """Each replica on ``name``'s copy, with (node, key) of what it holds on the snapshot (None:
        nothing): the replicas placed there, then the copies earlier batches moved there (a later
        batch's node drains those too)."""
        placements = list(Placement.objects.filter(node__name=name, status__in=ACTIVE_PLACEMENTS)
                          .select_related("deployment").order_by("pk"))
        moved = []
        for placement in placements + self.arrived.pop(name, []):
            move, held = self._copy(placement, name)
            if move.destination:
                self.arrived.setdefault(move.destination, []).append(placement)
            moved.append((move, held))
        return moved

    def _copy(self, placement: Placement, source: str) -> tuple[EngineMove, tuple[str, str] | None]:
        deployment = placement.deployment
        spec = self.specs.setdefault(deployment.pk, spec_of(deployment))
        index = self.next_index.get(deployment.pk)
        if index is None:
            index = next_replica_index(deployment)
        self.next_index[deployment.pk] = index + 1
        if spec.namespace not in self.quotas:
            self.quotas[spec.namespace] = namespace_quota(spec.namespace)
        quota = self.quotas[spec.namespace]
        key = workload_key(placement)
        size = placement.share_milli * max(1, len(placement.gpu_indexes or ()))
        try:
            (plan,) = decide(spec, self.inventory, self.scheduler, quota=quota, replica_indexes=[index])
        except NoCapacity as error:
            return EngineMove(key, size, source, DecisionOutcome.UNSCHEDULABLE, reason=error.message), None
        assignment = plan.decision.assignment
        if plan.outcome != DecisionOutcome.PLACED or assignment is None:
            return EngineMove(key, size, source, str(plan.outcome), reason=HANDED_OVER), None
        self.quotas[spec.namespace] = charge(quota, assignment, spec.memory_mib)
        move = EngineMove(key, size, source, DecisionOutcome.PLACED, assignment.node, assignment.gpu_indexes,
                          _partition(assignment))
        return move, (assignment.node, assignment.key)

    def reconfigure(self, name: str, target: NodeConfig) -> None:
        """The node drained and switched to ``target``: empty GPUs as the new config offers them."""
        node = self.node(name)
        layout = dict(target.mig_layout or ()) if target.mode == SharingMode.MIG else {}
        gpus = [_empty_gpu(node.gpu_model, gpu, layout) for gpu in node.gpus]
        # ``decide`` maps a MIG grant onto its instance row: the new instances get stand-ins (never claimed).
        index = self.inventory.index
        index.mig_rows = {key: row for key, row in index.mig_rows.items() if key[0] != name}
        for gpu in gpus:
            for part in gpu.partitions:
                index.mig_rows[(name, gpu.index, part.slot)] = FreeRow(0, part.slot, part.share_milli, part.memory_mib)
        self.snapshot.update_node(replace(node, sharing_mode=target.mode, sharing_replicas=target.replicas or 1,
                                          gpus=gpus, cordoned=False))


def _empty_gpu(model_key: str, gpu: GPUState, layout: dict[str, int]) -> GPUState:
    """``gpu`` with nothing on it; with a MIG ``layout``, its instances where the MIG planner puts them."""
    fresh = GPUState(index=gpu.index, memory_mib=gpu.memory_mib, mig_enabled=bool(layout))
    if layout:
        model = find_model(model_key)
        for slot, placed in enumerate(plan_layout(model, layout)):
            profile = model.mig_profile(placed.profile)
            fresh.partitions.append(PartitionState(
                kind=PartitionKind.MIG, slot=slot, share_milli=mig_share_milli(profile.compute_slices),
                memory_mib=profile.memory_mib, mig_profile=profile.name, mig_start=placed.start, mig_size=placed.size))
    return fresh


def _partition(assignment: Assignment) -> str:
    """What the copy is given, in words: "MIG 1g.10gb", "mps 250 m", "exclusive"."""
    first = assignment.partitions[0]
    if first.kind == PartitionKind.MIG:
        return f"MIG {first.mig_profile}"
    if first.kind == PartitionKind.EXCLUSIVE:
        return "exclusive"
    return f"{first.kind} {first.share_milli} m"
