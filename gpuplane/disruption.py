"""Settings of moves and disruption budgets (docs/design.md section 5a, docs/operations.md), read
from the environment; gpuplane/settings.py imports them.

How often the one mover advances every move, how long a move may take before it is given up (its
replacement released, the original kept), the cluster-wide budget of nodes disrupted at once (a
count, or a percentage of the GPU nodes rounded up; at least 1) and the minimum time between two
disruptions of one workload by different operations.
"""
from __future__ import annotations

from typing import Any

from gpuplane.env import env_count_or_percent, env_int

MOVE_INTERVAL_S = env_int("GPUPLANE_MOVE_INTERVAL_S", 5, minimum=1)
MOVE_TIMEOUT_S = env_int("GPUPLANE_MOVE_TIMEOUT_S", 600, minimum=10)
DISRUPTION_BUDGET = env_count_or_percent("GPUPLANE_DISRUPTION_BUDGET", "10%")
DISRUPTION_MIN_INTERVAL_S = env_int("GPUPLANE_DISRUPTION_MIN_INTERVAL_S", 300, minimum=0)

# The mover's tick on the beat schedule (settings.CELERY_BEAT_SCHEDULE).
MOVE_BEAT: dict[str, dict[str, Any]] = {
    "advance-moves": {
        "task": "scheduler.tasks.advance_moves_task",
        "schedule": float(MOVE_INTERVAL_S),
        "options": {"expires": MOVE_INTERVAL_S * 0.9},
    },
}
