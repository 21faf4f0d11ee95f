"""Where a new replica goes and which leaves first: efficiency and cost choose, never whether to
scale (``scheduler.core.autoscale``). Also the reversal count the replay reports. Pure Python."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """Where a new replica could go: a GPU model and sharing mode, with what it is predicted to
    deliver (requests/s within the SLO) and what it costs (USD per hour of its GPU share)."""

    gpu_model: str
    sharing_mode: str
    capacity_rps: float
    usd_per_hour: float
    tops_per_w: float = 0.0
    available: bool = True


def rank_targets(targets: Iterable[Target]) -> list[Target]:
    """Targets to try for a new replica, best first: available ones only, cheapest per request
    served within the SLO, then the more efficient (TOPS/W), then by name. Ranking never refuses:
    when the SLO is at risk a replica goes to the best available target, whatever it costs."""
    usable = [t for t in targets if t.available and t.capacity_rps > 0]
    return sorted(usable, key=lambda t: (t.usd_per_hour / t.capacity_rps, -t.tops_per_w, t.gpu_model, t.sharing_mode))


@dataclass(frozen=True)
class ReplicaView:
    """One running replica as scale-down sees it."""

    key: str
    usd_per_hour: float
    capacity_rps: float
    ready: bool = True
    created_at: float = 0.0


def choose_victim(replicas: Sequence[ReplicaView]) -> ReplicaView | None:
    """Which replica leaves first: one not ready yet (serves nothing), then the most expensive per
    request it can serve, then the newest."""
    if not replicas:
        return None
    return min(replicas, key=lambda r: (r.ready, -(r.usd_per_hour / r.capacity_rps if r.capacity_rps > 0 else math.inf),
                                        -r.created_at, r.key))


def reversals(changes: Sequence[tuple[float, int]]) -> int:
    """Direction reversals in a sequence of (time, replicas) changes: an up after a down or a
    down after an up."""
    count = 0
    last_direction = 0
    previous: int | None = None
    for _at, replicas in changes:
        if previous is not None and replicas != previous:
            direction = 1 if replicas > previous else -1
            if last_direction and direction != last_direction:
                count += 1
            last_direction = direction
        previous = replicas
    return count
