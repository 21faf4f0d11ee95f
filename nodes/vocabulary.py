"""What the cluster's sharing and capacity words mean: one definition each, with human labels.

Pure Python (no Django): the placement core reads these enums directly, and the Django models,
forms, filters and serializers derive their choices from them (``choices=SharingMode.choices``),
so a value read from the database is the same enum member the core compares against. Request
words (what a deploy request asks for) live with the core, in ``scheduler.core.types``.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Self

SHARE_MILLI_FULL = 1000  # a whole GPU's compute, in thousandths
# The placement core's GB, which deploy requests, pages and decision reasons all use.
MIB_PER_GB = 1024


class LabelledStrEnum(StrEnum):
    """A string enum whose members also carry the label people read.

    Members are declared as ``NAME = "value", "Label"``; the member *is* its value (a ``str``),
    so it compares equal to what the database, the API and the cluster hold.
    ``choices()`` gives Django's ``[(value, label), ...]``. Model fields take the method itself
    (Django 5 calls it), so a label change needs no migration; forms, filters and serializers
    take its result (django-filter's schema and DRF want a list).
    """

    _value_: str
    _label: str

    # ``label`` has a default only for the type checker: ``SharingMode("mig")`` looks a member up
    # by value without calling ``__new__``, while every member declaration must give a label.
    def __new__(cls, value: str, label: str = "") -> Self:
        if not label:
            raise TypeError(f"{cls.__name__} member {value!r} needs a label: NAME = {value!r}, 'Label'")
        member = str.__new__(cls, value)
        member._value_ = value
        member._label = label
        return member

    @property
    def label(self) -> str:
        """What the UI and the API show for this value."""
        return self._label

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        """``(value, label)`` pairs in declaration order, as Django's ``choices`` expects."""
        return [(member.value, member.label) for member in cls]

    @classmethod
    def values(cls) -> list[str]:
        """Every value in declaration order."""
        return [member.value for member in cls]


class SharingMode(LabelledStrEnum):
    """How a node's GPUs are shared; one mode per node because the device plugin config is per node."""

    EXCLUSIVE = "exclusive", "Exclusive (whole GPU)"
    MIG = "mig", "MIG"
    MPS = "mps", "MPS (uniform, device plugin)"  # R uniform clients per GPU
    MPS_WEIGHTED = "mps-weighted", "MPS (weighted, gpuplane daemon)"  # shares per pod, summing to <= 100 %
    TIMESLICE = "timeslice", "Time-slicing"


class PartitionKind(LabelledStrEnum):
    """What one workload is given on one GPU."""

    EXCLUSIVE = "exclusive", "Whole GPU"
    MIG = "mig", "MIG instance"
    MPS = "mps", "MPS slot"
    MPS_WEIGHTED = "mps-weighted", "Weighted MPS share"
    TIMESLICE = "timeslice", "Time-slice replica"


# The effects a Kubernetes taint may have; only the blocking ones keep new pods off a node.
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    """A Kubernetes node taint; only NoSchedule and NoExecute keep pods off a node."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
