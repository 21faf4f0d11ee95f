"""The words of a rollout: its status, strategy, failure policy, and each node's state."""
from nodes.vocabulary import LabelledStrEnum


class RolloutStatus(LabelledStrEnum):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    ROLLED_BACK = "rolled-back", "Rolled back"
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
