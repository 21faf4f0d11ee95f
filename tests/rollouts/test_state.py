"""The rollout state machines: legal moves happen once, each with an audit event; others never."""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from lifecycle.transitions import IllegalTransition
from rollouts.choices import NodeState, RolloutStatus
from rollouts.models import NODE_STATES, ROLLOUT_STATES, RollingUpdate, RolloutNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout() -> RollingUpdate:
    update = RollingUpdate.objects.create(name="r", config={"mode": "exclusive", "replicas": None, "mig_layout": None})
    RolloutNode.objects.create(rollout=update, node_name="gpu-a", batch_index=1)
    RolloutNode.objects.create(rollout=update, node_name="gpu-b", batch_index=2)
    return update


def test_a_rollout_runs_pauses_resumes_and_succeeds_each_step_audited(rollout):
    assert ROLLOUT_STATES.move(rollout, RolloutStatus.RUNNING, actor="system:rollouts", reason="started")
    started = RollingUpdate.objects.get(pk=rollout.pk).started_at
    assert started is not None
    assert ROLLOUT_STATES.move(rollout, RolloutStatus.PAUSED, reason="node gpu-a failed")
    assert ROLLOUT_STATES.move(rollout, RolloutStatus.RUNNING)
    assert ROLLOUT_STATES.move(rollout, RolloutStatus.SUCCEEDED)

    stored = RollingUpdate.objects.get(pk=rollout.pk)
    assert stored.status == "succeeded" and stored.finished_at is not None
    assert stored.started_at == started  # resuming keeps the first start
    verbs = list(AuditEvent.objects.filter(object_id=str(rollout.pk)).order_by("pk").values_list("verb", flat=True))
    assert verbs == ["rollingupdate.running", "rollingupdate.paused", "rollingupdate.running", "rollingupdate.succeeded"]
    paused = AuditEvent.objects.get(verb="rollingupdate.paused")
    assert paused.before == {"status": "running"} and paused.reason == "node gpu-a failed"


def test_a_move_from_the_wrong_state_does_nothing(rollout):
    assert not ROLLOUT_STATES.move(rollout, RolloutStatus.SUCCEEDED)  # pending cannot succeed without running
    assert ROLLOUT_STATES.move(rollout, RolloutStatus.FAILED)
    assert not ROLLOUT_STATES.move(rollout, RolloutStatus.RUNNING)  # a finished rollout never restarts
    assert RollingUpdate.objects.get(pk=rollout.pk).status == "failed"
    assert AuditEvent.objects.filter(object_id=str(rollout.pk)).count() == 1


def test_a_stale_copy_loses_the_race():
    update = RollingUpdate.objects.create(name="r", config={})
    other_copy = RollingUpdate.objects.get(pk=update.pk)
    assert ROLLOUT_STATES.move(update, RolloutStatus.RUNNING)
    assert ROLLOUT_STATES.move(update, RolloutStatus.PAUSED)
    # The other copy still believes "pending" but the row is paused: pause -> paused is not a move.
    assert not ROLLOUT_STATES.move(other_copy, RolloutStatus.PAUSED)


def test_a_node_goes_through_its_steps_in_order(rollout):
    step = rollout.nodes.get(node_name="gpu-a")
    assert not NODE_STATES.move(step, NodeState.DRAINING)  # never drained before its workloads are pre-warmed
    for state in (NodeState.PREWARMING, NodeState.DRAINING, NodeState.RECONFIGURING, NodeState.VERIFYING,
                  NodeState.SUCCEEDED):
        assert NODE_STATES.move(step, state), state
    assert rollout.progress_percent == 50.0
    assert NODE_STATES.move(step, NodeState.ROLLED_BACK, reason="rollout rolled back")
    assert RolloutNode.objects.get(pk=step.pk).reason == "rollout rolled back"
    assert AuditEvent.objects.filter(verb__startswith="rolloutnode.").count() == 6


def test_progress_counts_succeeded_and_skipped_nodes_as_done_but_not_rolled_back_or_failed_ones():
    update = RollingUpdate.objects.create(name="r", config={"mode": "exclusive", "replicas": None, "mig_layout": None})
    for number, state in enumerate((NodeState.SUCCEEDED, NodeState.SKIPPED, NodeState.ROLLED_BACK, NodeState.FAILED,
                                    NodeState.DRAINING), start=1):
        RolloutNode.objects.create(rollout=update, node_name=f"gpu-{number}", batch_index=number, state=state)

    # 2 of 5: a rolled-back node is back at its old config, a failed one never got there, one drains.
    assert update.progress_percent == 40.0


def test_unknown_states_are_a_programming_error(rollout):
    with pytest.raises(IllegalTransition):
        ROLLOUT_STATES.move(rollout, RolloutStatus.PENDING)
    with pytest.raises(IllegalTransition):
        NODE_STATES.move(rollout.nodes.first(), NodeState.PENDING)


def test_a_succeeded_node_is_rolled_back_through_the_same_steps_and_a_pending_one_skipped(rollout):
    step = rollout.nodes.get(node_name="gpu-a")
    for state in (NodeState.PREWARMING, NodeState.DRAINING, NodeState.RECONFIGURING, NodeState.VERIFYING,
                  NodeState.SUCCEEDED, NodeState.PREWARMING, NodeState.DRAINING, NodeState.RECONFIGURING,
                  NodeState.VERIFYING, NodeState.ROLLED_BACK):
        assert NODE_STATES.move(step, state), state
    assert not NODE_STATES.move(step, NodeState.PREWARMING)  # rolled back is final
    other = rollout.nodes.get(node_name="gpu-b")
    assert NODE_STATES.move(other, NodeState.SKIPPED, reason="not started")
    assert not NODE_STATES.move(other, NodeState.PREWARMING)  # skipped is final
