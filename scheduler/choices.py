"""Statuses only the Django side keeps (the request words are ``scheduler.core.types`` enums).

Labelled string enums like every other word of the vocabulary (``nodes.vocabulary``): the
members are plain strings for the database and type checkers, and Django's choices derive from
them (``choices=DeploymentStatus.choices`` on model fields, ``DeploymentStatus.choices()`` elsewhere).
"""
from nodes.vocabulary import LabelledStrEnum


class DeploymentStatus(LabelledStrEnum):
    PENDING = "pending", "Pending"
    PLACED = "placed", "Placed"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    DELETED = "deleted", "Deleted"


class PlacementStatus(LabelledStrEnum):
    RESERVED = "reserved", "Reserved"
    BINDING = "binding", "Binding"
    RUNNING = "running", "Running"
    FAILED = "failed", "Failed"
    RELEASED = "released", "Released"


class DecisionOutcome(LabelledStrEnum):
    """What one replica's placement decision came to (scheduler.models.Decision.outcome)."""

    PLACED = "placed", "Placed by gpuplane"
    UNSCHEDULABLE = "unschedulable", "Unschedulable"
    DEFAULT_SCHEDULER = "default-scheduler", "Handed to the default scheduler"
    SKIPPED = "skipped", "GPU selection skipped"


class MoveStatus(LabelledStrEnum):
    """Where one move of a replica stands (``scheduler.services.moving``)."""

    PLANNED = "planned", "Planned"
    REPLACEMENT_PLACED = "replacement_placed", "Replacement placed"
    REPLACEMENT_READY = "replacement_ready", "Replacement ready"
    ORIGINAL_EVICTING = "original_evicting", "Evicting the original"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    ROLLED_BACK = "rolled_back", "Rolled back (the original stays)"


class MoveRequester(LabelledStrEnum):
    """Who asked for a move: the one mover carries out every source's moves."""

    ROLLOUT = "rollout", "Rollout"
    CONSOLIDATION = "consolidation", "Consolidation plan"
    PREEMPTION = "preemption", "Preemption"
    SCALE_DOWN = "scale-down", "Scale-down"
    USER = "user", "User"


class MoveKind(LabelledStrEnum):
    """A move places a replacement before it evicts; a removal only evicts (scale-down, preemption)."""

    MOVE = "move", "Move"
    REMOVAL = "removal", "Removal"


MOVE_FINAL = (MoveStatus.DONE, MoveStatus.FAILED, MoveStatus.ROLLED_BACK)
# Moves that hold a replacement or are evicting: the disruptions in flight the budgets count.
MOVE_DISRUPTING = (MoveStatus.REPLACEMENT_PLACED, MoveStatus.REPLACEMENT_READY, MoveStatus.ORIGINAL_EVICTING)
MOVE_IN_FLIGHT = (MoveStatus.PLANNED, *MOVE_DISRUPTING)

M = MoveStatus
# The move's state machine (``scheduler.models.MOVE_STATES``): to-status -> the statuses it may come from.
MOVE_FROM: dict[str, tuple[str, ...]] = {
    M.REPLACEMENT_PLACED: (M.PLANNED,),
    M.REPLACEMENT_READY: (M.REPLACEMENT_PLACED,),
    M.ORIGINAL_EVICTING: (M.REPLACEMENT_READY, M.PLANNED),  # from planned: a removal (no replacement)
    M.DONE: (M.ORIGINAL_EVICTING,),
    # Failed: the move went wrong after the original was evicted (the workload did not come back),
    # or before (nothing to roll back to). Rolled back: given up with the original still serving.
    M.FAILED: (M.PLANNED, M.REPLACEMENT_PLACED, M.REPLACEMENT_READY, M.ORIGINAL_EVICTING),
    M.ROLLED_BACK: (M.PLANNED, M.REPLACEMENT_PLACED, M.REPLACEMENT_READY),
}
