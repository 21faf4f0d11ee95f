"""The placement core: pure Python (no Django), benchmarkable and property-testable alone.

Typical use (the services build the snapshot from the database through ``scheduler.adapters``)::

    from scheduler.core import ClusterSnapshot, PlacementRequest, scheduler_for

    result = scheduler_for("balanced").schedule(PlacementRequest(key="ns/app#0", memory_mib=8192), snapshot)
    result.outcome, result.node, result.assignment, result.to_dict()

The node words (``SharingMode``, ``PartitionKind``, ``Taint``) come from ``nodes.vocabulary``.
"""
from scheduler.core.classify import Classification, ClassificationSettings, WorkloadClass, classify
from scheduler.core.cycle import Scheduler
from scheduler.core.decision import NodeVerdict, Outcome, PluginScore, ScheduleResult
from scheduler.core.diagnosis import Diagnosis
from scheduler.core.fit import build_need
from scheduler.core.framework import Profile
from scheduler.core.profiles import PROFILES, ProfileError, build_profile, get_profile, scheduler_for
from scheduler.core.reservation import CapacityError
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import (
    Assignment,
    GPUState,
    NodeState,
    PartitionGrant,
    PartitionState,
    PlacementRequest,
    Priority,
    QuotaUsage,
    SharingRequest,
    Toleration,
    WorkloadType,
    new_gpus,
)

__all__ = [
    "PROFILES",
    "Assignment",
    "CapacityError",
    "Classification",
    "ClassificationSettings",
    "ClusterSnapshot",
    "Diagnosis",
    "GPUState",
    "NodeState",
    "NodeVerdict",
    "Outcome",
    "PartitionGrant",
    "PartitionState",
    "PlacementRequest",
    "PluginScore",
    "Priority",
    "Profile",
    "ProfileError",
    "QuotaUsage",
    "ScheduleResult",
    "Scheduler",
    "SharingRequest",
    "Toleration",
    "WorkloadClass",
    "WorkloadType",
    "build_need",
    "build_profile",
    "classify",
    "get_profile",
    "new_gpus",
    "scheduler_for",
]
