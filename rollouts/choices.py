"""The words of a rollout: its status, strategy, failure policy, and each node's state."""
from nodes.vocabulary import LabelledStrEnum


class RolloutStatus(LabelledStrEnum):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    ROLLED_BACK = "rolled-back", "Rolled back"
    EXPIRED = "expired", "Expired (not started in time)"
    ABORTED = "aborted", "Aborted"  # by an operator (its nodes part-way changed were restored)


class RolloutStrategy(LabelledStrEnum):
    ROLLING = "rolling", "Rolling (batches of at most max_unavailable nodes)"
    BLUE_GREEN = "blue-green", "Blue-green (move every workload off, then change all nodes)"


class OnFailure(LabelledStrEnum):
    PAUSE = "pause", "Pause the rollout"
    ROLLBACK = "rollback", "Roll back every changed node"


class NodeState(LabelledStrEnum):
    PENDING = "pending", "Pending"
    SKIPPED = "skipped", "Skipped"
    PREWARMING = "prewarming", "Pre-warming its workloads elsewhere"
    DRAINING = "draining", "Draining"
    RECONFIGURING = "reconfiguring", "Reconfiguring"
    VERIFYING = "verifying", "Verifying the new config"
    MOVING_BACK = "moving-back", "Moving its workloads back (proven, uncordoned)"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    ROLLED_BACK = "rolled-back", "Rolled back"


# A rollout in one of these owns its nodes: no second rollout may target them.
ACTIVE_STATUSES = (RolloutStatus.PENDING, RolloutStatus.RUNNING, RolloutStatus.PAUSED)
# Nodes in these count as done for the progress bar: at the target config, or left alone with a
# reason. A rolled-back node is back at its previous config and a failed one never got there:
# neither is done (the page counts them apart).
DONE_NODE_STATES = (NodeState.SUCCEEDED, NodeState.SKIPPED)


S, N = RolloutStatus, NodeState
# The state machines (``rollouts.models``): to-status -> the statuses it may come from.
ROLLOUT_FROM: dict[str, tuple[str, ...]] = {
    S.RUNNING: (S.PENDING, S.PAUSED),
    S.PAUSED: (S.RUNNING,),
    S.SUCCEEDED: (S.RUNNING,),
    S.FAILED: (S.PENDING, S.RUNNING, S.PAUSED),
    S.ROLLED_BACK: (S.RUNNING, S.PAUSED),
    S.EXPIRED: (S.PENDING,),  # rollouts.expiry: not started by its start_by, its nodes released
    S.ABORTED: (S.PENDING, S.RUNNING, S.PAUSED),
}
FINAL_STATUSES = (S.SUCCEEDED, S.FAILED, S.ROLLED_BACK, S.EXPIRED, S.ABORTED)

# A node part-way changed (cordoned, owned by its rollout until it is done).
IN_FLIGHT = (N.PREWARMING, N.DRAINING, N.RECONFIGURING, N.VERIFYING)
NODE_FROM: dict[str, tuple[str, ...]] = {
    # From succeeded: rolled back through the same steps, towards its previous config.
    N.PREWARMING: (N.PENDING, N.SUCCEEDED),
    N.DRAINING: (N.PREWARMING,),
    N.RECONFIGURING: (N.DRAINING,),
    N.VERIFYING: (N.RECONFIGURING,),
    N.MOVING_BACK: (N.VERIFYING,),  # rollouts.move_back
    N.SUCCEEDED: (N.VERIFYING, N.MOVING_BACK),
    N.FAILED: IN_FLIGHT,
    # Not started when its rollout rolls back, or found holding a do-not-disrupt pod before
    # anything on it changed.
    N.SKIPPED: (N.PENDING, N.PREWARMING, N.DRAINING),
    # Proven back at its previous config (verifying), or stopped part-way and restored.
    N.ROLLED_BACK: (N.FAILED, N.SUCCEEDED, *IN_FLIGHT),
}
