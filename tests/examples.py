"""How many examples a property test runs: the count an issue asks for, scaled while developing.

CI and ``make test`` run every property at its full count (the scale is 1). A developer iterating
on one module may set ``GPUPLANE_TEST_EXAMPLES_SCALE=0.05`` to run each at a twentieth of it
(never fewer than 10); the full count still runs before anything is merged. A scale above 1
multiplies: a property whose default count is kept small to spare the suite reaches the count its
issue asks for that way (e.g. the webhook contract: ``GPUPLANE_TEST_EXAMPLES_SCALE=100`` -> 10,000).
"""
from __future__ import annotations

import os


def examples(count: int) -> int:
    """``count`` examples, scaled by ``GPUPLANE_TEST_EXAMPLES_SCALE`` (default 1, ignored in CI)."""
    if os.environ.get("CI") == "true":
        return count
    scale = float(os.environ.get("GPUPLANE_TEST_EXAMPLES_SCALE", "1"))
    return max(10, round(count * scale)) if scale != 1 else count
