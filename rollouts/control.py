"""What a user may do to a rollout: start, pause, resume, abort (``act``).

Each is one move of the rollout's state machine (``rollouts.models.ROLLOUT_STATES``); the reconciler does the
work. Starting first runs the preview again on the cluster as it is now, and is refused when a
workload that must move has nowhere to go any more; then it writes the configs the rollout needs
into the GPU operator's ConfigMaps (``rollouts.configs``), and is refused, no node touched, when
they cannot be written. ``NotAllowed`` (a 409) says why when the rollout's status does not allow the action.
Pausing stops the reconciler between steps; a node part-way changed stays as it is (cordoned,
owned by the paused rollout) until resumed or aborted; a rollout paused while rolling back rolls
back on when resumed. Aborting restores every node part-way changed (previous labels, pre-warmed
copies given up, uncordoned; a node part-way rolled back goes back to the rollout's config, which
it was proven at) and ends the rollout ``failed``.
"""
from __future__ import annotations

from typing import Any

from django.utils import timezone

from lifecycle.errors import Conflict
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.sharing.node_config import NodeConfig
from rollouts import configs as rollout_configs
from rollouts.choices import ROLLOUT_FROM, NodeState, RolloutStatus
from rollouts.expiry import expire, expired
from rollouts.models import ROLLOUT_STATES, RollingUpdate
from rollouts.preview import preview
from rollouts.reconciler import restore_in_flight

S = RolloutStatus

# action -> (the status it moves to, the statuses it is allowed from)
ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "start": (S.RUNNING, (S.PENDING,)),
    "pause": (S.PAUSED, (S.RUNNING,)),
    "resume": (S.RUNNING, (S.PAUSED,)),
    "abort": (S.ABORTED, (S.PENDING, S.RUNNING, S.PAUSED)),
}
assert all(set(allowed) <= set(ROLLOUT_FROM[to]) for to, allowed in ACTIONS.values())


class NotAllowed(Conflict):
    """The rollout's status (``status``, in the answer) does not allow the action, or it is not
    safe to start now (409); the message says why."""


def act(rollout: RollingUpdate, action: str, *, actor: Any = None,
        cluster: ClusterBackend | None = None) -> RollingUpdate:
    """Apply ``action`` to ``rollout``; raise ``NotAllowed`` when its status forbids it (or a racing
    change got there first). ValueError for an unknown action."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}")
    to, allowed = ACTIONS[action]
    if rollout.status not in allowed:
        raise NotAllowed(_refusal(action, rollout.status, allowed), status=rollout.status)
    if action == "start":
        rollout.refresh_from_db(fields=["status", "start_by"])
    if action == "start" and expired(rollout, timezone.now()):
        expire(rollout)
        rollout.refresh_from_db()
        raise NotAllowed(f"Cannot start: {rollout.message}.", status=rollout.status)
    if action == "start":
        _check_still_safe(rollout, cluster)
        _write_configs(rollout, cluster, actor)
    reason = f"{action} by {getattr(actor, 'username', actor) or 'system'}"
    if action == "abort":
        restored = restore_in_flight(rollout, cluster if cluster is not None else get_cluster(), "rollout aborted")
        if restored:
            reason += f"; restored {', '.join(restored)}"
    if not _move(rollout, to, allowed, actor, reason):
        rollout.refresh_from_db()
        raise NotAllowed(_refusal(action, rollout.status, allowed), status=rollout.status)
    rollout.refresh_from_db()
    return rollout


def _move(rollout: RollingUpdate, to: str, allowed: tuple[str, ...], actor: Any, reason: str) -> bool:
    # The state machine allows more sources than an action does (the reconciler's moves): check
    # the action's own first, then let the conditional UPDATE settle a race.
    rollout.refresh_from_db(fields=["status"])
    if rollout.status not in allowed:
        return False
    return ROLLOUT_STATES.move(rollout, to, actor=actor, reason=reason)


def _check_still_safe(rollout: RollingUpdate, cluster: ClusterBackend | None) -> None:
    """The preview again, on the cluster as it is now: the workloads to move must still have
    somewhere to go (the cluster may have filled up since the rollout was created)."""
    names = list(rollout.nodes.filter(state=NodeState.PENDING).values_list("node_name", flat=True))
    config = NodeConfig.of(rollout.config["mode"], rollout.config.get("replicas"), rollout.config.get("mig_layout"))
    shown = preview(names, config, strategy=rollout.strategy, max_unavailable=rollout.max_unavailable,
                    rollout_id=rollout.pk, cluster=cluster)
    if shown.blockers:
        raise NotAllowed(f"Not safe to start now: {'; '.join(shown.blockers)}.", status=rollout.status)


def _write_configs(rollout: RollingUpdate, cluster: ClusterBackend | None, actor: Any) -> None:
    """Write the configs the rollout needs into the GPU operator's ConfigMaps before it may touch a
    node; NotAllowed (nothing cordoned, the rollout still pending) when they cannot be written."""
    try:
        rollout_configs.publish(rollout, cluster if cluster is not None else get_cluster(), actor=actor)
    except ClusterError as error:
        raise NotAllowed(f"Cannot start: the configs it needs cannot be written ({error}); no node was touched.",
                         status=rollout.status) from None


def _refusal(action: str, status: str, allowed: tuple[str, ...]) -> str:
    return f"Cannot {action} a rollout that is {status}: only a {' or '.join(allowed)} one."
