"""Why a replica could not be placed, in the request's units, and a change that would work.

``explain_unplaced`` is called when replica ``failed`` of a request found no node. It

1. releases the tentative reservations of the request's earlier replicas (``held``) from the
   snapshot, so that the explanation is against the cluster as it is without this request: a
   node is never blamed for capacity that only the same request held (such a node counts under
   ``HELD_BY_REQUEST``);
2. decides the failed replica again, without reserving: its diagnosis counts a node that its
   hardware rules out under that reason (``scheduler.core.limits``), so reasons that do not
   matter (a too-small GPU's sharing mode) drop out. The dominant reason, which the answer
   leads with, is the one that has to change: the hardware reason when it rules out every node
   (no other change fixes it), else the reason of the most nodes that could hold the request;
3. offers a ``Suggestion`` only after checking it: every replica of the changed request is
   decided again on the same snapshot (each one reserving, like a deploy, then all undone), and
   the first candidate that places them all is offered. None is offered rather than a wrong one.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from scheduler.core.cycle import Scheduler
from scheduler.core.decision import Outcome, ScheduleResult
from scheduler.core.diagnosis import (
    HARDWARE_GPUS,
    HARDWARE_MEMORY,
    HARDWARE_REASONS,
    HELD_BY_REQUEST,
    Diagnosis,
    counted_reason,
)
from scheduler.core.limits import largest_gpu_mib, most_gpus
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import Assignment, PlacementRequest, QuotaUsage, SharingRequest
from scheduler.core.wording import counted, gb

MAX_CHECK_CYCLES = 200  # scheduling cycles all suggestion checks of one failure may spend

_WHOLE_GPU_SHARING = (SharingRequest.AUTO, SharingRequest.EXCLUSIVE)
GANG_SHORT = "not enough free GPUs for the gang"  # GangFit's reason: the node lacks free GPUs now


@dataclass(frozen=True)
class Suggestion:
    """A change to the deploy request (API field -> new value) that places every replica now."""

    text: str
    changes: Mapping[str, object]

    def to_dict(self) -> dict[str, object]:
        return {"text": self.text, "changes": dict(self.changes)}


@dataclass(frozen=True)
class Unplaced:
    """The explanation of a replica that could not be placed.

    ``replica`` is its position in the request (1-based) of ``replicas``; ``released`` counts the
    earlier replicas whose tentative reservations were released; ``result`` is its decision
    against the cluster without them; ``reason`` the dominant reason ("" when none).
    """

    replica: int
    replicas: int
    released: int
    result: ScheduleResult
    reason: str
    lead: str
    suggestion: Suggestion | None

    def message(self) -> str:
        """The dominant reason first, then the suggestion, then every reason counted."""
        parts = []
        if self.replicas > 1:
            failed = f"Replica {self.replica} of {self.replicas} could not be placed"
            if self.released == 1:
                failed += "; the earlier replica's tentative reservation was released"
            elif self.released:
                failed += f"; the {self.released} earlier replicas' tentative reservations were released"
            parts.append(failed)
        parts.append(self.lead)
        if self.suggestion is not None:
            parts.append(f"Suggestion: {self.suggestion.text}")
        parts.append(self.result.message)
        return ". ".join(_capitalized(part) for part in parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "replica": self.replica,
            "replicas": self.replicas,
            "released": self.released,
            "reason": self.reason,
            "lead": self.lead,
            "suggestion": self.suggestion.to_dict() if self.suggestion else None,
        }


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def charge(quota: QuotaUsage | None, assignment: Assignment, memory_mib: int) -> QuotaUsage | None:
    """``quota`` with one more placed replica counted as used (how the next replica sees it)."""
    if quota is None:
        return None
    return replace(quota, gpu_milli_used=quota.gpu_milli_used + assignment.share_milli,
                   memory_mib_used=quota.memory_mib_used + memory_mib)


def explain_unplaced(scheduler: Scheduler, snapshot: ClusterSnapshot, requests: Sequence[PlacementRequest],
                     failed: int, held: Sequence[Assignment]) -> Unplaced:
    """Explain why ``requests[failed]`` found no node (see the module docstring).

    ``requests`` are every replica of the request, in order: the first with the namespace's quota
    as it was before the request, the failed one with the quota it was decided with (its earlier
    replicas count against a quota, though their capacity is released); ``held`` the assignments
    the earlier replicas reserved on ``snapshot`` (released here).
    """
    for assignment in reversed(held):
        snapshot.unreserve(assignment)
    result = scheduler.schedule(requests[failed], snapshot, reserve=False, hardware_first=True)
    if result.outcome == Outcome.PLACED:
        result = _held_by_request(scheduler, snapshot, result)
        # The nodes that would take it are the answer, however many others are ruled out.
        reason, count = HELD_BY_REQUEST, result.diagnosis.rejected[HELD_BY_REQUEST]
    else:
        reason, count = _dominant(result.diagnosis)
    checker = _Checker(scheduler, snapshot)
    suggestion = next((s for s, replicas in _candidates(snapshot, requests, result, failed, reason)
                       if checker.places(requests[:replicas], s.changes)), None)
    lead = _lead(snapshot, result, reason, count, failed, told=suggestion is not None)
    return Unplaced(replica=failed + 1, replicas=len(requests), released=len(held), result=result, reason=reason,
                    lead=lead, suggestion=suggestion)


def _dominant(diagnosis: Diagnosis) -> tuple[str, int]:
    """The reason that has to change: a hardware reason when it rules out every rejected node
    (nothing else would help), else the reason of the most nodes that could hold the request."""
    others = [(reason, count) for reason, count in diagnosis.ordered() if count and reason not in HARDWARE_REASONS]
    if others:
        return others[0]
    return diagnosis.dominant() or ("", 0)


def _held_by_request(scheduler: Scheduler, snapshot: ClusterSnapshot, placed: ScheduleResult) -> ScheduleResult:
    """The replica fits once the request's own reservations are gone: say so per node, not "full"."""
    assert placed.matrix is not None and placed.need is not None
    diagnosis = placed.diagnosis
    counts = {**diagnosis.rejected, HELD_BY_REQUEST: diagnosis.available}
    detail = "the replica would fit here without the capacity this request's earlier replicas hold"
    examples = [(snapshot.index[row.node], row.reason, row.detail) for row in placed.rejected_rows]
    examples += [(int(node), HELD_BY_REQUEST, detail) for node in placed.matrix.ids.tolist()]
    examples.sort()
    return ScheduleResult.not_placed(
        placed.request, scheduler.profile, placed.need, Diagnosis(diagnosis.total_nodes, 0, counts), examples,
        Outcome.UNSCHEDULABLE, idle_gpus=scheduler.idle_gpus(snapshot), pre_filter=None, names=snapshot.names)


def _lead(snapshot: ClusterSnapshot, result: ScheduleResult, reason: str, count: int, failed: int, *,
          told: bool) -> str:
    """The dominant reason as a sentence, with the cluster's figure that makes it so (left to the
    suggestion when ``told``: it starts with that figure)."""
    need = result.need
    total = result.diagnosis.total_nodes
    if need is not None and count == total:
        if reason == HARDWARE_MEMORY:
            per = f"{gb(need.memory_per_gpu_mib)} per GPU" if need.multi_gpu else gb(need.memory_per_gpu_mib)
            figure = "" if told else f": the largest has {gb(largest_gpu_mib(snapshot))}"
            return f"no GPU of this cluster can hold {per}{figure}"
        if reason == HARDWARE_GPUS:
            figure = "" if told else f": the largest has {most_gpus(snapshot)}"
            return f"no node of this cluster has {need.gpu_count} GPUs{figure}"
    if reason == HELD_BY_REQUEST:
        return (f"the cluster has room for {counted(failed, 'replica')} of this size now: "
                f"{counted_reason(reason, count)}")
    if not reason:
        return result.message
    lead = counted_reason(reason, count)
    example = next((row for row in result.rejected_rows if row.reason == reason and row.detail), None)
    return f"{lead} ({example.node}: {example.detail})" if example else lead


def _candidates(snapshot: ClusterSnapshot, requests: Sequence[PlacementRequest], result: ScheduleResult,
                failed: int, reason: str) -> Iterator[tuple[Suggestion, int]]:
    """Changes worth checking, the smallest change first, each with how many replicas it places."""
    need = result.need
    if need is None:
        return
    first = requests[0]
    count = len(requests)
    memory = first.memory_mib
    gang = first.gpu_count
    largest = largest_gpu_mib(snapshot)
    most = most_gpus(snapshot)
    # Whole GPUs: a multi-GPU replica cannot share, so a shared-only choice goes back to auto.
    whole: dict[str, object] = {} if first.sharing in _WHOLE_GPU_SHARING else {"sharing": SharingRequest.AUTO.value}
    if largest and need.memory_per_gpu_mib > largest:
        for gpus in range(max(gang + 1, -(-memory // largest)), most + 1):
            text = (f"the largest GPU has {gb(largest)}: ask for {gpus} GPUs per replica "
                    f"({gb(-(-memory // gpus))} on each)")
            yield Suggestion(text, {"gpu_count": gpus, **whole}), count
    if first.sharing != SharingRequest.AUTO:
        why = "multi-GPU replicas need whole GPUs" if gang > 1 and whole else f"no {first.sharing} unit fits"
        yield Suggestion(f"{why}: let the scheduler choose the sharing mode (sharing \"auto\")",
                         {"sharing": SharingRequest.AUTO.value}), count
    if gang > 1:
        for gpus in range(min(gang - 1, most), 0, -1):
            if largest and -(-memory // gpus) > largest:
                break
            if gang > most:
                why = f"the largest node has {most} GPUs: "
            elif reason == GANG_SHORT:
                why = f"no node has {gang} free GPUs: "
            else:
                why = ""
            each = f" ({gb(-(-memory // gpus))} on each)" if gpus > 1 else ""
            yield Suggestion(f"{why}ask for {counted(gpus, 'GPU')} per replica{each}", {"gpu_count": gpus}), count
    if failed >= 1:
        # Every replica before the failed one was placed: that many fit now, and no more.
        yield Suggestion(f"ask for {counted(failed, 'replica')}", {"replicas": failed}), failed


class _Checker:
    """Decides changed requests on the snapshot (reserving, then undoing), within a cycle budget."""

    def __init__(self, scheduler: Scheduler, snapshot: ClusterSnapshot) -> None:
        self.scheduler = scheduler
        self.snapshot = snapshot
        self.cycles_left = MAX_CHECK_CYCLES

    def places(self, requests: Sequence[PlacementRequest], changes: Mapping[str, object]) -> bool:
        """Whether every one of ``requests``, changed by ``changes``, is placed (nothing stays held)."""
        fields = {name: value for name, value in changes.items() if name in ("gpu_count", "sharing")}
        if "sharing" in fields:
            fields["sharing"] = SharingRequest(str(fields["sharing"]))
        if len(requests) > self.cycles_left:
            return False
        held: list[Assignment] = []
        quota = requests[0].quota
        try:
            for request in requests:
                self.cycles_left -= 1
                changed = replace(request, quota=quota, **fields)  # type: ignore[arg-type]
                result = self.scheduler.schedule(changed, self.snapshot)
                if result.outcome != Outcome.PLACED or result.assignment is None:
                    return False
                held.append(result.assignment)
                quota = charge(quota, result.assignment, request.memory_mib)
            return True
        finally:
            for assignment in reversed(held):
                self.snapshot.unreserve(assignment)
