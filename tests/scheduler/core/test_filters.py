"""Filter plugins, one table per plugin: which node passes, and with what reason it is refused."""
from __future__ import annotations

import numpy as np
import pytest

from nodes.vocabulary import PartitionKind, SharingMode, Taint
from scheduler.core import ClusterSnapshot, NodeState, QuotaUsage, SharingRequest, Toleration, new_gpus
from scheduler.core.fit import build_need
from scheduler.core.framework import CycleState
from scheduler.core.plugins import (
    CapabilityMatch,
    GangFit,
    GPUMemoryFit,
    NamespaceQuota,
    NodeSchedulable,
    SharingModeCompat,
    UtilizationLimit,
)
from tests.scheduler.core.builders import (
    A100,
    DEMO_MIG_LAYOUT,
    GIB,
    H100,
    cycle,
    filter_codes,
    filter_reasons,
    make_node,
    occupy,
    request,
)

# ---- NodeSchedulable ---------------------------------------------------------------------


def test_node_schedulable_table():
    snapshot = ClusterSnapshot([
        make_node("ok"),
        make_node("down", ready=False),
        make_node("cordoned", cordoned=True),
        make_node("down-and-cordoned", ready=False, cordoned=True),  # not ready wins: code 1
    ])
    assert filter_reasons(NodeSchedulable(), snapshot, request()) == {
        "ok": "",
        "down": "node not ready",
        "cordoned": "cordoned",
        "down-and-cordoned": "node not ready",
    }


# ---- CapabilityMatch ---------------------------------------------------------------------


def _unknown_model_node() -> NodeState:
    # GFD reported a product the catalog does not know: gpu_model is empty.
    return NodeState(name="mystery", gpu_model="", sharing_mode=SharingMode.EXCLUSIVE, gpus=new_gpus(A100, 1))


def test_capability_match_models():
    snapshot = ClusterSnapshot([make_node("a100"), make_node("h100", H100), _unknown_model_node()])
    plugin = CapabilityMatch()
    assert filter_reasons(plugin, snapshot, request()) == {"a100": "", "h100": "", "mystery": "unknown GPU model"}
    # Families and catalog keys are both accepted, in any case.
    assert filter_codes(plugin, snapshot, request(gpu_models=("h100",))) == {"a100": 2, "h100": 0, "mystery": 1}
    assert filter_codes(plugin, snapshot, request(gpu_models=("A100-SXM4-40GB",))) == {"a100": 0, "h100": 2, "mystery": 1}


def test_capability_match_node_selector():
    snapshot = ClusterSnapshot([
        make_node("a", labels={"zone": "a", "pool": "serving"}),
        make_node("b", labels={"zone": "b", "pool": "serving"}),
        make_node("c", labels={"zone": "a"}),
    ])
    req = request(node_selector={"zone": "a", "pool": "serving"})
    assert filter_reasons(CapabilityMatch(), snapshot, req) == {
        "a": "", "b": "node labels do not match", "c": "node labels do not match",
    }
    state = cycle(snapshot, req, CapabilityMatch())
    assert CapabilityMatch().explain(state, snapshot.index["b"], 3) == "missing labels zone=a"


@pytest.mark.parametrize(
    ("taint", "tolerations", "code"),
    [
        (Taint("gpu", "h100", "NoSchedule"), (), 4),
        (Taint("gpu", "h100", "NoExecute"), (), 4),
        (Taint("gpu", "h100", "PreferNoSchedule"), (), 0),  # only a preference: never blocks
        (Taint("gpu", "h100", "NoSchedule"), (Toleration("gpu", "Equal", "h100"),), 0),
        (Taint("gpu", "h100", "NoSchedule"), (Toleration("gpu", "Equal", "a100"),), 4),  # value differs
        (Taint("gpu", "h100", "NoSchedule"), (Toleration("gpu", "Exists"),), 0),
        (Taint("gpu", "h100", "NoSchedule"), (Toleration("gpu", "Exists", effect="NoExecute"),), 4),
        (Taint("gpu", "h100", "NoSchedule"), (Toleration(operator="Exists"),), 0),  # tolerates everything
    ],
)
def test_capability_match_taints_and_tolerations(taint, tolerations, code):
    snapshot = ClusterSnapshot([make_node("tainted", taints=(taint,))])
    assert filter_codes(CapabilityMatch(), snapshot, request(tolerations=tolerations)) == {"tainted": code}


# ---- SharingModeCompat -------------------------------------------------------------------


def _mode_nodes() -> ClusterSnapshot:
    return ClusterSnapshot([
        make_node("exclusive"),
        make_node("mig", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT),
        make_node("mps-2", mode=SharingMode.MPS, replicas=2),
        make_node("mps-4", mode=SharingMode.MPS, replicas=4),
        make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4),
        make_node("slice-2", mode=SharingMode.TIMESLICE, replicas=2),
        make_node("slice-4", mode=SharingMode.TIMESLICE, replicas=4),
    ])


def test_sharing_mode_compat_a_50_percent_request():
    # A medium model's 50 % is a default for MPS only: uniform MPS slots need 1000 // R >= 500,
    # i.e. R <= 2; time-slicing is sized by memory, so R = 4 serves it.
    assert filter_reasons(SharingModeCompat(), _mode_nodes(), request(8)) == {
        "exclusive": "",
        "mig": "",
        "mps-2": "",
        "mps-4": "MPS share too small",  # 1000 // 4 = 250 < 500
        "weighted": "",
        "slice-2": "",
        "slice-4": "",
    }


def test_sharing_mode_compat_a_stated_50_percent_share_binds_time_slicing_too():
    # A stated share is demanded of every unit: a replica's nominal share 1000 // R >= 500.
    assert filter_reasons(SharingModeCompat(), _mode_nodes(), request(8, share_milli=500)) == {
        "exclusive": "",
        "mig": "",
        "mps-2": "",
        "mps-4": "MPS share too small",  # 1000 // 4 = 250 < 500
        "weighted": "",
        "slice-2": "",
        "slice-4": "time-slice share too small",  # 250 < 500
    }


def test_sharing_mode_compat_a_25_percent_request_fits_every_mode():
    # Tiny class: 250 milli; R = 4 gives 1000 // 4 = 250 >= 250.
    assert set(filter_codes(SharingModeCompat(), _mode_nodes(), request(2)).values()) == {0}


def test_sharing_mode_compat_explicit_sharing_only_lands_on_that_mode():
    codes = filter_codes(SharingModeCompat(), _mode_nodes(), request(2, sharing=SharingRequest.MPS))
    assert codes == {"exclusive": 1, "mig": 1, "mps-2": 0, "mps-4": 0, "weighted": 1, "slice-2": 1, "slice-4": 1}
    codes = filter_codes(SharingModeCompat(), _mode_nodes(), request(2, sharing=SharingRequest.EXCLUSIVE))
    # Exclusive means a whole GPU; a MIG node can give one from a GPU with MIG disabled.
    assert {name for name, code in codes.items() if code == 0} == {"exclusive", "mig"}


def test_sharing_mode_compat_multi_gpu_requests_need_whole_gpus():
    codes = filter_codes(SharingModeCompat(), _mode_nodes(), request(100, gpu_count=2))
    # Shared modes hand out one replica per request; a weighted-MPS node gives untouched GPUs,
    # 100 % of each, to a gang that asks for mps-weighted (its device plugin must admit it).
    assert codes == {"exclusive": 0, "mig": 0, "mps-2": 2, "mps-4": 2, "weighted": 2, "slice-2": 2, "slice-4": 2}
    weighted = filter_codes(SharingModeCompat(), _mode_nodes(),
                            request(100, gpu_count=2, sharing=SharingRequest.MPS_WEIGHTED))
    assert {name for name, code in weighted.items() if code == 0} == {"weighted"}


def test_a_cpu_only_request_passes_every_mode():
    assert set(filter_codes(SharingModeCompat(), _mode_nodes(), request(0, gpu_count=0)).values()) == {0}


def test_sharing_mode_compat_nvidia_limits():
    snapshot = ClusterSnapshot([
        # MPS only on full GPUs: an MPS node with a MIG-enabled GPU is misconfigured.
        make_node("mps-on-mig", mode=SharingMode.MPS, replicas=2, mig=DEMO_MIG_LAYOUT, mig_gpus=1),
        make_node("a100-48", mode=SharingMode.MPS, replicas=48),  # 48 clients: the limit from cc 7.5
        make_node("a100-49", mode=SharingMode.MPS_WEIGHTED, replicas=49),
        make_node("v100-16", "V100-SXM2-32GB", SharingMode.MPS, replicas=16),  # cc 7.0: 16 clients
        make_node("v100-17", "V100-SXM2-32GB", SharingMode.MPS, replicas=17),
    ])
    req = request(0.25, share_milli=10)  # a tiny share, so only the limits can refuse
    assert filter_reasons(SharingModeCompat(), snapshot, req) == {
        "mps-on-mig": "MPS cannot run on MIG GPUs",
        "a100-48": "",
        "a100-49": "MPS clients exceed the GPU's limit",
        "v100-16": "",
        "v100-17": "MPS clients exceed the GPU's limit",
    }


def test_sharing_mode_compat_explains_the_mps_rule():
    snapshot = _mode_nodes()
    state = cycle(snapshot, request(8), SharingModeCompat())
    text = SharingModeCompat().explain(state, snapshot.index["mps-4"], 5)
    assert text == "MPS with R=4 gives each client 25%; a 50% request needs R <= 2"


def test_sharing_mode_compat_prefilter_refuses_multi_gpu_shared_requests():
    state_request = request(40, gpu_count=2, sharing=SharingRequest.TIMESLICE)
    state = CycleState(state_request, build_need(state_request), _mode_nodes())
    status = SharingModeCompat().pre_filter(state)
    assert not status.ok
    assert status.reason == "timeslice requests take exactly one GPU"


# ---- GangFit -----------------------------------------------------------------------------


def test_gang_fit_table():
    eight_with_three_busy = make_node("eight-5-free", H100, gpus=8)
    for gpu in range(3):
        occupy(eight_with_three_busy, gpu, 1000, 81559, f"team/busy-{gpu}", PartitionKind.EXCLUSIVE)
    eight_with_four_busy = make_node("eight-4-free", H100, gpus=8)
    for gpu in range(4):
        occupy(eight_with_four_busy, gpu, 1000, 81559, f"team/busy-{gpu}", PartitionKind.EXCLUSIVE)
    snapshot = ClusterSnapshot([make_node("two", H100, gpus=2), eight_with_three_busy, eight_with_four_busy])
    # gpu_count 5: "two" can never hold it; 8 - 3 = 5 free >= 5; 8 - 4 = 4 free < 5.
    assert filter_reasons(GangFit(), snapshot, request(100, gpu_count=5)) == {
        "two": "node has fewer GPUs than the gang",
        "eight-5-free": "",
        "eight-4-free": "not enough free GPUs for the gang",
    }
    assert set(filter_codes(GangFit(), snapshot, request(100)).values()) == {0}  # one GPU: not a gang


# ---- GPUMemoryFit ------------------------------------------------------------------------


def test_gpu_memory_fit_whole_gpus():
    full = make_node("full")
    for gpu in range(2):
        occupy(full, gpu, 1000, 40960, f"team/x-{gpu}", PartitionKind.EXCLUSIVE)
    snapshot = ClusterSnapshot([make_node("a100"), full])
    # A100-40GB: 40960 MiB. 40 GiB = 40960 fits exactly; 48 GiB = 49152 > 40960.
    assert filter_codes(GPUMemoryFit(), snapshot, request(40, sharing=SharingRequest.EXCLUSIVE)) == {
        "a100": 0, "full": 3,
    }
    assert filter_reasons(GPUMemoryFit(), snapshot, request(48)) == {
        "a100": "insufficient GPU memory", "full": "no free GPU or partition",
    }


def test_gpu_memory_fit_gang_memory_is_per_gpu():
    snapshot = ClusterSnapshot([make_node("h100", H100, gpus=2)])
    # 100 GiB over 2 GPUs = 51200 MiB each <= 81559; 200 GiB = 102400 each > 81559.
    assert filter_codes(GPUMemoryFit(), snapshot, request(100, gpu_count=2)) == {"h100": 0}
    assert filter_codes(GPUMemoryFit(), snapshot, request(200, gpu_count=2)) == {"h100": 1}


def test_gpu_memory_fit_uniform_mps_slot_memory_is_memory_over_r():
    snapshot = ClusterSnapshot([make_node("mps-4", mode=SharingMode.MPS, replicas=4)])
    # Slot memory 40960 // 4 = 10240 MiB: 10 GiB fits, 11 GiB does not (the share does: 250).
    assert filter_codes(GPUMemoryFit(), snapshot, request(10, share_milli=250)) == {"mps-4": 0}
    assert filter_reasons(GPUMemoryFit(), snapshot, request(11, share_milli=250)) == {
        "mps-4": "insufficient GPU memory",
    }


def test_gpu_memory_fit_weighted_mps_needs_share_and_memory_on_one_gpu():
    room = make_node("room", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=1)
    occupy(room, 0, 500, 8 * GIB, "team/a")
    occupy(room, 0, 250, 4 * GIB, "team/b")  # 750 held: 250 free
    no_share = make_node("no-share", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=1)
    occupy(no_share, 0, 750, 8 * GIB, "team/a")
    occupy(no_share, 0, 250, 4 * GIB, "team/b")  # 1000 held: 0 free, 2 of 4 slots left
    no_slot = make_node("no-slot", mode=SharingMode.MPS_WEIGHTED, replicas=2, gpus=1)
    occupy(no_slot, 0, 100, GIB, "team/a")
    occupy(no_slot, 0, 100, GIB, "team/b")  # R = 2 pods: no slot although 800 is free
    split = make_node("split", mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=2)
    occupy(split, 0, 500, 38 * GIB, "team/a")  # GPU 0: 500 free, 2 GiB free
    occupy(split, 1, 900, 10 * GIB, "team/b")  # GPU 1: 100 free, 30 GiB free
    snapshot = ClusterSnapshot([room, no_share, no_slot, split])
    assert filter_reasons(GPUMemoryFit(), snapshot, request(4, share_milli=250)) == {
        "room": "",  # 1000 - 750 = 250 >= 250, memory 40 - 12 = 28 GiB >= 4
        "no-share": "insufficient free GPU share",
        "no-slot": "no free GPU or partition",
        # 250 milli and 4 GiB: GPU 0 has the share (500) but 2 GiB, GPU 1 the memory but 100 milli.
        "split": "insufficient GPU memory",
    }
    # 1 GiB fits next to GPU 0's share.
    assert filter_reasons(GPUMemoryFit(), snapshot, request(1, share_milli=250))["split"] == ""


def test_gpu_memory_fit_timeslice_counts_memory_handed_out():
    node = make_node("slice", mode=SharingMode.TIMESLICE, replicas=4, gpus=2)
    occupy(node, 0, 250, 30 * GIB, "team/a")
    occupy(node, 1, 250, 30 * GIB, "team/b")
    snapshot = ClusterSnapshot([node])
    # Each GPU: 40 - 30 = 10 GiB free; 10 GiB fits, 11 GiB fits nowhere.
    assert filter_codes(GPUMemoryFit(), snapshot, request(10, share_milli=250)) == {"slice": 0}
    assert filter_codes(GPUMemoryFit(), snapshot, request(11, share_milli=250)) == {"slice": 1}


@pytest.mark.parametrize(
    ("memory_gib", "share_milli", "reason"),
    [
        (8, 250, ""),  # 2g.10gb: 285 >= 250 milli, 10 GiB >= 8
        (15, 100, ""),  # 3g.20gb: the only instance with 15 GiB
        (8, 500, "insufficient free GPU share"),  # the largest instance, 3g, gives 428 < 500
        (25, 250, "insufficient GPU memory"),  # the largest instance holds 20 GiB
    ],
)
def test_gpu_memory_fit_mig_instances(memory_gib, share_milli, reason):
    snapshot = ClusterSnapshot([make_node("mig", mode=SharingMode.MIG, mig=DEMO_MIG_LAYOUT)])
    assert filter_reasons(GPUMemoryFit(), snapshot, request(memory_gib, share_milli=share_milli)) == {"mig": reason}


# ---- UtilizationLimit --------------------------------------------------------------------


def test_utilization_limit_table():
    snapshot = ClusterSnapshot([
        make_node("busy", util=90.0),  # mean 90 >= 90
        make_node("almost", util=89.9),
        make_node("no-metrics"),  # counts as idle (seed 004)
    ])
    assert filter_reasons(UtilizationLimit(), snapshot, request()) == {
        "busy": "utilization >= 90%", "almost": "", "no-metrics": "",
    }
    assert filter_reasons(UtilizationLimit(max_pct=50), snapshot, request())["almost"] == "utilization >= 50%"


def test_utilization_limit_uses_the_mean_over_gpus_with_samples():
    node = make_node("mixed", gpus=4)
    for gpu, util in zip(node.gpus, (95.0, 90.0, 85.0, None), strict=True):
        gpu.utilization_pct = util
    snapshot = ClusterSnapshot([node])
    # (95 + 90 + 85) / 3 = 90 >= 90; the GPU without a sample does not count.
    assert filter_codes(UtilizationLimit(), snapshot, request()) == {"mixed": 1}


# ---- NamespaceQuota ----------------------------------------------------------------------


def test_namespace_quota_charges_the_unit_each_node_would_give():
    snapshot = ClusterSnapshot([make_node("exclusive"), make_node("mps-2", mode=SharingMode.MPS, replicas=2)])
    quota = QuotaUsage(gpu_milli_limit=2000, gpu_milli_used=1500)
    # 8 GiB, 50 %: an MPS R=2 slot charges 500 (1500 + 500 = 2000 <= 2000); a whole GPU 1000.
    assert filter_reasons(NamespaceQuota(), snapshot, request(8, quota=quota)) == {
        "exclusive": "namespace GPU quota exceeded", "mps-2": "",
    }
    assert set(filter_codes(NamespaceQuota(), snapshot, request(8)).values()) == {0}  # no quota given
    state = cycle(snapshot, request(8, quota=quota, namespace="team"), NamespaceQuota())
    assert NamespaceQuota().explain(state, 0, 1) == "team: 1.5 GPUs in use + 1 GPU here would exceed the limit of 2 GPUs"


def test_namespace_quota_memory_is_checked_once_per_request():
    req = request(8, quota=QuotaUsage(memory_mib_limit=10 * GIB, memory_mib_used=4 * GIB))
    state = CycleState(req, build_need(req), ClusterSnapshot([make_node("a")]))
    status = NamespaceQuota().pre_filter(state)
    # 4 + 8 = 12 GiB > 10 GiB.
    assert not status.ok and status.reason == "namespace memory quota exceeded"
    assert "12 GB would exceed the limit of 10 GB" in status.detail


def test_filters_see_only_the_nodes_they_are_given():
    snapshot = ClusterSnapshot([make_node("a", cordoned=True), make_node("b")])
    state = cycle(snapshot, request())
    assert NodeSchedulable().filter(state, np.array([1])).tolist() == [0]
    assert NodeSchedulable().filter(state, np.array([1, 0])).tolist() == [0, 2]
