"""The placement core: pure Python (no Django), benchmarkable and property-testable alone.

Typical use (the services build the snapshot from the database through ``scheduler.adapters``)::

    from scheduler.core import ClusterSnapshot, PlacementRequest, scheduler_for

    decision = scheduler_for("balanced").schedule(PlacementRequest(key="ns/app#0", memory_mib=8192), snapshot)
    decision.outcome, decision.node, decision.assignment, decision.to_dict()
"""
from scheduler.core.classify import Classification, ClassificationSettings, WorkloadClass, classify
from scheduler.core.decision import Decision, NodeVerdict, Outcome, PluginScore
from scheduler.core.diagnosis import Diagnosis
from scheduler.core.framework import Profile, Scheduler, build_need
from scheduler.core.profiles import PROFILES, ProfileError, build_profile, get_profile, scheduler_for
from scheduler.core.snapshot import CapacityError, ClusterSnapshot
from scheduler.core.types import (
    Assignment,
    GPUState,
    NamespaceQuota,
    NodeState,
    PartitionGrant,
    PartitionKind,
    PartitionState,
    PlacementRequest,
    Priority,
    SharingMode,
    SharingRequest,
    Taint,
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
    "Decision",
    "Diagnosis",
    "GPUState",
    "NamespaceQuota",
    "NodeState",
    "NodeVerdict",
    "Outcome",
    "PartitionGrant",
    "PartitionKind",
    "PartitionState",
    "PlacementRequest",
    "PluginScore",
    "Priority",
    "Profile",
    "ProfileError",
    "Scheduler",
    "SharingMode",
    "SharingRequest",
    "Taint",
    "Toleration",
    "WorkloadClass",
    "WorkloadType",
    "build_need",
    "build_profile",
    "classify",
    "get_profile",
    "scheduler_for",
]
