"""The plugin registry: every plugin class by its NAME (profiles refer to plugins by name)."""
from __future__ import annotations

from scheduler.core.framework import Plugin
from scheduler.core.plugins.best_fit import BestFit
from scheduler.core.plugins.capability_match import CapabilityMatch
from scheduler.core.plugins.capacity_reserve import CapacityReserve
from scheduler.core.plugins.fragmentation_gradient import FragmentationGradient
from scheduler.core.plugins.gang_fit import GangFit
from scheduler.core.plugins.gpu_memory_fit import GPUMemoryFit
from scheduler.core.plugins.least_utilized import LeastUtilized
from scheduler.core.plugins.namespace_quota import NamespaceQuota
from scheduler.core.plugins.node_resources_fit import NodeResourcesFit
from scheduler.core.plugins.node_schedulable import NodeSchedulable
from scheduler.core.plugins.partition_compat import PartitionCompat
from scheduler.core.plugins.power_efficiency import PowerEfficiency
from scheduler.core.plugins.priority_power import PriorityPower
from scheduler.core.plugins.sharing_mode_compat import SharingModeCompat
from scheduler.core.plugins.sharing_plan import SharingPlan
from scheduler.core.plugins.utilization_limit import UtilizationLimit
from scheduler.core.plugins.workload_affinity import WorkloadAffinity

REGISTRY: dict[str, type[Plugin]] = {
    plugin.NAME: plugin
    for plugin in (
        NodeSchedulable,
        NodeResourcesFit,
        CapabilityMatch,
        SharingModeCompat,
        GangFit,
        GPUMemoryFit,
        UtilizationLimit,
        NamespaceQuota,
        PowerEfficiency,
        WorkloadAffinity,
        LeastUtilized,
        PriorityPower,
        PartitionCompat,
        BestFit,
        FragmentationGradient,
        SharingPlan,
        CapacityReserve,
    )
}

__all__ = ["REGISTRY"] + sorted(REGISTRY)
