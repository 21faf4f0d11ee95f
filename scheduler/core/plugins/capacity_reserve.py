"""Reserve CapacityReserve: claim the assigned partitions in the snapshot (undone on failure)."""
from __future__ import annotations

from scheduler.core.framework import SUCCESS, Code, CycleState, ReservePlugin, Status
from scheduler.core.reservation import CapacityError
from scheduler.core.types import Assignment


class CapacityReserve(ReservePlugin):
    """Applies the assignment to the snapshot, so the next cycle sees it; refuses over-allocation.

    The database reservation (conditional updates, constraints) is the services' job; this keeps
    the in-memory snapshot consistent across the replicas of one deploy request and benchmarks.
    """

    NAME = "CapacityReserve"

    def reserve(self, state: CycleState, assignment: Assignment) -> Status:
        try:
            state.snapshot.reserve(assignment)
        except CapacityError as error:
            return Status(Code.UNSCHEDULABLE, "capacity changed during reserve", str(error), self.NAME)
        return SUCCESS

    def unreserve(self, state: CycleState, assignment: Assignment) -> None:
        state.snapshot.unreserve(assignment)
