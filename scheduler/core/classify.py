"""Workload classification: a request's size class, preferred GPU and default compute share.

docs/design.md section 3:

| class  | model memory | preferred GPU | default share |
|--------|--------------|---------------|---------------|
| tiny   | < 4 GB       | A100          | MPS 25 %      |
| medium | 4 - 16 GB    | A100          | MPS 50 %      |
| large  | > 16 GB      | H100          | exclusive     |

The default share is a default for MPS only: each sharing mode sizes a replica by its own unit
(``scheduler.core.sizing``).

Priority HIGH with a latency SLO at or under ``latency_override_ms`` overrides to an exclusive
H100 (seed scenario 1). Every threshold is a parameter (``ClassificationSettings``) so that the
settings module can change them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nodes.vocabulary import MIB_PER_GB, SHARE_MILLI_FULL
from scheduler.core.types import Priority


class WorkloadClass(StrEnum):
    TINY = "tiny"
    MEDIUM = "medium"
    LARGE = "large"


@dataclass(frozen=True)
class ClassRule:
    """What a class gets by default: a preferred GPU family and a compute share."""

    preferred_gpu: str
    share_milli: int


@dataclass(frozen=True)
class ClassificationSettings:
    """Thresholds: tiny below ``tiny_below_mib``, large above ``large_above_mib``, else medium."""

    tiny_below_mib: int = 4 * MIB_PER_GB
    large_above_mib: int = 16 * MIB_PER_GB
    latency_override_ms: int = 100
    override_gpu: str = "H100"
    rules: dict[WorkloadClass, ClassRule] = field(
        default_factory=lambda: {
            WorkloadClass.TINY: ClassRule("A100", 250),
            WorkloadClass.MEDIUM: ClassRule("A100", 500),
            WorkloadClass.LARGE: ClassRule("H100", SHARE_MILLI_FULL),
        }
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClassificationSettings:
        """Build from settings data: the scalar fields plus optional ``rules``
        ({"tiny": {"preferred_gpu": "A100", "share_milli": 250}, ...}); missing keys keep defaults."""
        default = cls()
        rules = dict(default.rules)
        for name, rule in dict(data.get("rules", {})).items():
            rules[WorkloadClass(name)] = ClassRule(str(rule["preferred_gpu"]), int(rule["share_milli"]))
        return cls(
            tiny_below_mib=int(data.get("tiny_below_mib", default.tiny_below_mib)),
            large_above_mib=int(data.get("large_above_mib", default.large_above_mib)),
            latency_override_ms=int(data.get("latency_override_ms", default.latency_override_ms)),
            override_gpu=str(data.get("override_gpu", default.override_gpu)),
            rules=rules,
        )


DEFAULT_CLASSIFICATION = ClassificationSettings()


@dataclass(frozen=True)
class Classification:
    """The outcome: class, preferred GPU family, default share, and a sentence saying why."""

    workload_class: WorkloadClass
    preferred_gpu: str
    share_milli: int
    latency_override: bool
    reason: str

    @property
    def exclusive(self) -> bool:
        return self.share_milli >= SHARE_MILLI_FULL

    def to_dict(self) -> dict[str, object]:
        return {
            "workload_class": str(self.workload_class),
            "preferred_gpu": self.preferred_gpu,
            "share_milli": self.share_milli,
            "latency_override": self.latency_override,
            "reason": self.reason,
        }


def classify(
    memory_mib: int,
    priority: Priority | str = Priority.MEDIUM,
    latency_slo_ms: int | None = None,
    settings: ClassificationSettings = DEFAULT_CLASSIFICATION,
) -> Classification:
    """Classify a model by the GPU memory it needs, then apply the latency override.

    Boundaries: ``memory_mib < tiny_below_mib`` is tiny, ``memory_mib > large_above_mib`` is large,
    both boundaries themselves are medium (4 GB and 16 GB exactly are medium, as "4 - 16 GB"
    reads). HIGH priority with ``latency_slo_ms <= latency_override_ms`` becomes an exclusive
    ``override_gpu`` whatever the size: a shared GPU cannot promise a tight tail latency.
    """
    if memory_mib < settings.tiny_below_mib:
        workload_class = WorkloadClass.TINY
    elif memory_mib > settings.large_above_mib:
        workload_class = WorkloadClass.LARGE
    else:
        workload_class = WorkloadClass.MEDIUM
    rule = settings.rules[workload_class]
    size = f"{memory_mib / MIB_PER_GB:g} GB is {workload_class}"
    if (
        Priority(priority) == Priority.HIGH
        and latency_slo_ms is not None
        and latency_slo_ms <= settings.latency_override_ms
    ):
        return Classification(
            workload_class=workload_class,
            preferred_gpu=settings.override_gpu,
            share_milli=SHARE_MILLI_FULL,
            latency_override=True,
            reason=(
                f"{size}; HIGH priority with a {latency_slo_ms} ms latency SLO "
                f"(<= {settings.latency_override_ms} ms) gets an exclusive {settings.override_gpu}"
            ),
        )
    # The class's share is a default for MPS only (scheduler.core.sizing): say so.
    share = "exclusive" if rule.share_milli >= SHARE_MILLI_FULL else f"MPS {rule.share_milli / 10:g} % by default"
    return Classification(
        workload_class=workload_class,
        preferred_gpu=rule.preferred_gpu,
        share_milli=rule.share_milli,
        latency_override=False,
        reason=f"{size}: prefers {rule.preferred_gpu}, {share}",
    )
