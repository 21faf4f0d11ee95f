"""Preemption planning: the fewest lower-priority placements whose eviction lets a request fit.

Pure Python (no Django). ``plan_preemption(priority, candidates, fits)`` looks at each node:

1. candidates are the node's placements of strictly lower priority whose eviction the budgets
   allow (a PodDisruptionBudget with no disruption left, or do-not-disrupt, rules one out): a
   placement of equal or higher priority is never a victim, so no cycle (A preempts B preempts A)
   can form — B could only preempt what is below B, and A is above it;
2. ordered as Kueue orders them: lowest priority first, then the most recently admitted first;
3. removed in that order until the request fits (``fits(node, removed)``), then put back in
   reverse order while the request still fits (Kueue's minimal-set pass);
4. with at most ``EXACT_LIMIT`` candidates the node's subsets smaller than that set are searched
   as well, smallest first, so the set is a minimum, not only minimal (the greedy pass can keep a
   small victim it took early when one larger victim alone would do).

Of all nodes, the plan with the fewest victims wins, then the lowest highest victim priority,
then the lowest sum of priorities, then the node name. ``fits`` must be monotone (evicting more
never makes the request fit less), which holds for capacity. MIG work never falls back to a
non-MIG node and time-sliced work only to a time-sliced pool (``fallback_pools``): the caller
passes only such nodes' candidates.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from nodes.vocabulary import PartitionKind, SharingMode

EXACT_LIMIT = 12  # 2^12 subsets per node at most; beyond it Kueue's greedy pass alone

Fits = Callable[[str, frozenset[str]], bool]


@dataclass(frozen=True)
class Candidate:
    """A placement that could be evicted: its key, node, priority value and admission order
    (larger = admitted later); ``blocked`` says why the budgets forbid evicting it ("" if they do not)."""

    key: str
    node: str
    priority: int
    admitted: float
    blocked: str = ""


@dataclass(frozen=True)
class PreemptionPlan:
    """The node the request goes to and the victims to evict there (in eviction order)."""

    node: str
    victims: tuple[Candidate, ...]

    @property
    def cost(self) -> tuple[int, int, int, str]:
        return plan_cost(self.node, self.victims)

    def describe(self) -> str:
        names = ", ".join(f"{v.key} (priority {v.priority})" for v in self.victims)
        return f"evict {names} on {self.node}" if self.victims else f"nothing to evict on {self.node}"


def plan_cost(node: str, victims: Sequence[Candidate]) -> tuple[int, int, int, str]:
    """Fewest victims, then the lowest highest priority among them, then the lowest sum, then the node."""
    return (len(victims), max((v.priority for v in victims), default=-(2**31)),
            sum(v.priority for v in victims), node)


def kueue_order(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Lowest priority first; among equals the most recently admitted first (then by key)."""
    return sorted(candidates, key=lambda c: (c.priority, -c.admitted, c.key))


def eligible(priority: int, candidates: Iterable[Candidate]) -> list[Candidate]:
    """The candidates a request of ``priority`` may evict: strictly lower, and not blocked."""
    return [c for c in candidates if c.priority < priority and not c.blocked]


def _node_plan(node: str, ordered: list[Candidate], fits: Fits) -> tuple[Candidate, ...] | None:
    if fits(node, frozenset()):
        return ()
    removed: list[Candidate] = []
    for candidate in ordered:
        removed.append(candidate)
        if fits(node, frozenset(c.key for c in removed)):
            break
    else:
        return None
    # Kueue: put back, last taken first, every victim the request does not need.
    for candidate in reversed(list(removed)):
        trial = [c for c in removed if c is not candidate]
        if fits(node, frozenset(c.key for c in trial)):
            removed = trial
    best = tuple(removed)
    if len(ordered) <= EXACT_LIMIT:
        best_cost = plan_cost(node, best)
        for size in range(1, len(best) + 1):
            for subset in combinations(ordered, size):
                cost = plan_cost(node, subset)
                if cost < best_cost and fits(node, frozenset(c.key for c in subset)):
                    best, best_cost = subset, cost
            if len(best) <= size:
                break
    return tuple(kueue_order(best))


def plan_preemption(priority: int, candidates: Iterable[Candidate], fits: Fits,
                    nodes: Iterable[str] = ()) -> PreemptionPlan | None:
    """The cheapest plan (see the module docstring) or None when no eviction makes room.

    ``nodes`` lists nodes to consider besides those of the candidates (a node with nothing to
    evict may already fit). Never names a victim of equal or higher priority or a blocked one.
    """
    by_node: dict[str, list[Candidate]] = {node: [] for node in nodes}
    for candidate in eligible(priority, candidates):
        by_node.setdefault(candidate.node, []).append(candidate)
    best: PreemptionPlan | None = None
    for node in sorted(by_node):
        victims = _node_plan(node, kueue_order(by_node[node]), fits)
        if victims is None:
            continue
        plan = PreemptionPlan(node, victims)
        if best is None or plan.cost < best.cost:
            best = plan
    return best


def fallback_pools(kind: PartitionKind) -> frozenset[SharingMode]:
    """The node modes a placement of ``kind`` may be re-placed on: MIG work only on MIG nodes
    (a MIG instance's memory and fault isolation are what it was given), time-sliced work only on
    another time-sliced pool, MPS on MPS nodes, whole GPUs wherever whole GPUs are handed out."""
    if kind == PartitionKind.MIG:
        return frozenset({SharingMode.MIG})
    if kind == PartitionKind.TIMESLICE:
        return frozenset({SharingMode.TIMESLICE})
    if kind == PartitionKind.MPS:
        return frozenset({SharingMode.MPS})
    if kind == PartitionKind.MPS_WEIGHTED:
        return frozenset({SharingMode.MPS_WEIGHTED})
    return frozenset({SharingMode.EXCLUSIVE, SharingMode.MIG})
