"""nodes.telemetry.limits: each GPU's physical limits, from the catalog, inside the bounds of any GPU."""
from __future__ import annotations

import pytest

from nodes.catalog import CATALOG
from nodes.telemetry.limits import gpu_limits
from nodes.telemetry.samples import METRIC_RANGES, plausible


@pytest.mark.parametrize("key", CATALOG)
def test_a_catalog_models_limits_lie_within_the_bounds_of_any_gpu(key):
    model = CATALOG[key]
    limits = gpu_limits(key, model.memory_mib)

    assert limits["power_w"].high == model.tdp_w * 1.5
    assert limits["sm_clock_mhz"].high == round(model.max_sm_clock_mhz * 1.25)
    for name, limit in limits.items():
        # Otherwise the API would accept, then the limit refuse, a value the schema says is fine.
        assert METRIC_RANGES[name][0] < limit.high <= METRIC_RANGES[name][1], (name, limit)


def test_memory_is_bounded_by_the_larger_of_the_inventorys_and_the_catalogs_figure():
    assert gpu_limits("H100-SXM5-80GB", 81920)["memory_used_mib"].high == 81920  # inventory's, above NVML's 81559
    assert gpu_limits("H100-SXM5-80GB", 40000)["memory_total_mib"].high == 81559  # the catalog's
    assert gpu_limits("", 4096)["memory_used_mib"].high == 4096


def test_a_model_the_catalog_does_not_know_keeps_the_bounds_of_any_gpu():
    limits = gpu_limits("B300-SXM", 200_000)

    assert (limits["power_w"].high, limits["sm_clock_mhz"].high) == (2000, 3500)
    assert "B300-SXM" in limits["power_w"].reason


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("power_w", 700.0, True),
        ("power_w", 0, True),
        ("power_w", 1.7e308, False),
        ("power_w", float("inf"), False),
        ("power_w", float("nan"), False),
        ("power_w", -0.1, False),
        ("memory_used_mib", 10**400, False),  # compared as an int: no OverflowError
        ("memory_used_mib", 2**31 - 1, True),
        ("utilization_pct", True, False),
        ("temperature_c", "40", False),
        ("temperature_c", None, False),
    ],
)
def test_plausible(name, value, expected):
    assert plausible(name, value) is expected
