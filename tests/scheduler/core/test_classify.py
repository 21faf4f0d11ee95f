"""Classification: size class, preferred GPU and default share (docs/design.md section 3)."""
from __future__ import annotations

import pytest

from scheduler.core import ClassificationSettings, Priority, WorkloadClass, classify
from scheduler.core.classify import ClassRule

GIB = 1024


@pytest.mark.parametrize(
    ("memory_mib", "priority", "slo_ms", "expected_class", "preferred", "share_milli", "override"),
    [
        (1 * GIB, Priority.MEDIUM, None, WorkloadClass.TINY, "A100", 250, False),
        (4 * GIB - 1, Priority.LOW, None, WorkloadClass.TINY, "A100", 250, False),  # just under 4 GB
        (4 * GIB, Priority.MEDIUM, None, WorkloadClass.MEDIUM, "A100", 500, False),  # 4 GB is medium
        (8 * GIB, Priority.LOW, None, WorkloadClass.MEDIUM, "A100", 500, False),  # seed scenario 2
        (16 * GIB, Priority.MEDIUM, None, WorkloadClass.MEDIUM, "A100", 500, False),  # 16 GB is medium
        (16 * GIB + 1, Priority.MEDIUM, None, WorkloadClass.LARGE, "H100", 1000, False),
        (40 * GIB, Priority.MEDIUM, None, WorkloadClass.LARGE, "H100", 1000, False),
        # HIGH with a tight SLO overrides to an exclusive H100, whatever the size.
        (40 * GIB, Priority.HIGH, 100, WorkloadClass.LARGE, "H100", 1000, True),  # seed scenario 1
        (2 * GIB, Priority.HIGH, 50, WorkloadClass.TINY, "H100", 1000, True),
        # ... but not with a loose SLO, without one, or at another priority.
        (2 * GIB, Priority.HIGH, 101, WorkloadClass.TINY, "A100", 250, False),
        (2 * GIB, Priority.HIGH, None, WorkloadClass.TINY, "A100", 250, False),
        (2 * GIB, Priority.MEDIUM, 50, WorkloadClass.TINY, "A100", 250, False),
    ],
)
def test_it_classifies_by_memory_and_applies_the_latency_override(
    memory_mib, priority, slo_ms, expected_class, preferred, share_milli, override
):
    result = classify(memory_mib, priority, slo_ms)
    assert result.workload_class == expected_class
    assert result.preferred_gpu == preferred
    assert result.share_milli == share_milli
    assert result.latency_override is override
    assert result.exclusive is (share_milli == 1000)


def test_thresholds_and_rules_are_parameters():
    settings = ClassificationSettings.from_dict(
        {
            "tiny_below_mib": 2 * GIB,
            "large_above_mib": 8 * GIB,
            "latency_override_ms": 20,
            "rules": {"medium": {"preferred_gpu": "L40S", "share_milli": 330}},
        }
    )
    assert classify(3 * GIB, settings=settings).workload_class == WorkloadClass.MEDIUM  # tiny under default
    assert classify(3 * GIB, settings=settings).preferred_gpu == "L40S"
    assert classify(3 * GIB, settings=settings).share_milli == 330
    assert classify(9 * GIB, settings=settings).workload_class == WorkloadClass.LARGE  # medium under default
    assert classify(9 * GIB, Priority.HIGH, 50, settings).latency_override is False  # 50 > 20 ms
    assert settings.rules[WorkloadClass.TINY] == ClassRule("A100", 250)  # unchanged rules keep defaults


def test_the_reason_says_why():
    assert "40 GB is large" in classify(40 * GIB, Priority.HIGH, 100).reason
    assert "exclusive H100" in classify(40 * GIB, Priority.HIGH, 100).reason
    assert classify(8 * GIB).reason == "8 GB is medium: prefers A100, MPS 50 % by default"
