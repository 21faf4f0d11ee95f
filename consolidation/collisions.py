"""Plans that collide: two plans touching one node (emptying it, or filling it), or moving one replica.

A plan relies on its nodes as they were when it was made (``ConsolidationPlan.fingerprint``: the
nodes its moves leave and the nodes they go to). Two plans on one node cannot both be right:
the first to move changes what the second relied on, and a second copy of a replica the first
already moved is a replica too many (issue 18: two approved plans with the same move each placed
a replacement, and one was never given back). So:

- the analysis leaves the nodes of approved and executing plans alone (``claimed_nodes``);
- approving a plan that collides with an approved or executing one is refused (409, the reason);
- the executor aborts, untouched, an approved plan that collides with one executing (the check
  that holds whatever raced: the executor's ticks never overlap);
- moves in flight that any other operation asked for (a rollout's, another plan's, a scale-down's
  or a preemption's removal: ``scheduler.models.Move`` of either kind) count too: a plan touching
  their replicas or nodes is refused (409, the reason naming the move) and aborted the same way.

``plan_lock`` makes the read-check-write of an analysis or an approval take turns on PostgreSQL.
"""
from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from consolidation.choices import IN_FLIGHT_STATUSES
from consolidation.models import ConsolidationPlan
from lifecycle.locks import transaction_lock
from scheduler.choices import MOVE_IN_FLIGHT
from scheduler.models import Move

PLANS_LOCK = "gpuplane:consolidation:plans"


def plan_lock() -> None:
    """Inside a transaction: take turns with every other writer of plans (``lifecycle.locks.transaction_lock``)."""
    transaction_lock(PLANS_LOCK)


def nodes_of(plan: ConsolidationPlan) -> set[str]:
    """The nodes ``plan`` touches: those its moves leave and those they go to."""
    return set(plan.fingerprint) | {m["from_node"] for m in plan.moves} | {m["to_node"] for m in plan.moves}


def placements_of(plan: ConsolidationPlan) -> set[int]:
    return {int(m["placement"]) for m in plan.moves}


def collision(plan: ConsolidationPlan, other: ConsolidationPlan) -> str:
    """How ``plan`` collides with ``other``, in words; "" when they do not."""
    same = sorted(m["workload"] for m in plan.moves if int(m["placement"]) in placements_of(other))
    if same:
        return f"plan {other.pk} ({other.status}) moves the same replica{'s' if len(same) > 1 else ''}: {', '.join(same)}"
    shared = sorted(nodes_of(plan) & nodes_of(other))
    if shared:
        return f"plan {other.pk} ({other.status}) touches the same node{'s' if len(shared) > 1 else ''}: {', '.join(shared)}"
    return ""


def requester_of(plan: ConsolidationPlan) -> str:
    """What the plan's moves name as the operation that asked for them."""
    return f"consolidationplan:{plan.pk}"


def moves_in_the_way(plan: ConsolidationPlan, said: Iterable[ConsolidationPlan] = ()) -> list[str]:
    """Moves and removals in flight, asked for by any operation but this plan (and the plans
    ``said`` already), of the plan's replicas (or their replacements) or off or onto its nodes."""
    nodes = nodes_of(plan)
    replicas = placements_of(plan)
    mine = [requester_of(p) for p in (plan, *said)]
    moves = (Move.objects.filter(status__in=MOVE_IN_FLIGHT).exclude(requester__in=mine)
             .filter(Q(original_id__in=replicas) | Q(replacement_id__in=replicas) | Q(from_node__in=nodes)
                     | Q(to_node__in=nodes))
             .select_related("deployment").order_by("pk"))
    return [f"{m.kind} {m.pk} ({m.requester}, {m.get_status_display().lower()}) of {m.deployment} off "
            f"{m.from_node or 'its node'} is in flight on the same replica or nodes" for m in moves]


def collisions(plan: ConsolidationPlan, statuses: Iterable[str] = IN_FLIGHT_STATUSES) -> list[str]:
    """How ``plan`` collides with every other plan in ``statuses`` (oldest first), then with the moves
    other operations have in flight; [] when it collides with none."""
    others = ConsolidationPlan.objects.filter(status__in=list(statuses)).exclude(pk=plan.pk).order_by("pk")
    found = [(other, how) for other in others if (how := collision(plan, other))]
    return [how for _, how in found] + moves_in_the_way(plan, [other for other, _ in found])


def claimed_nodes() -> set[str]:
    """Nodes an approved or executing plan touches: the analysis neither empties them nor fills them."""
    claimed: set[str] = set()
    for plan in ConsolidationPlan.objects.filter(status__in=IN_FLIGHT_STATUSES).only("fingerprint", "moves"):
        claimed |= nodes_of(plan)
    return claimed
