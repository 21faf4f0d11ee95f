"""The admission decision flow (scheduler.core.admission) as tables: opt-outs and exemptions, policy
precedence, seed 003's defaults, and the refusals NVIDIA's limits call for."""
from __future__ import annotations

import pytest

from nodes.vocabulary import SharingMode
from scheduler.core.admission import (
    Action,
    ClusterFacts,
    MIGRoom,
    PodFacts,
    PolicyRule,
    choose_sharing,
    timeslice_replicas,
)
from scheduler.core.types import SharingRequest

GIB = 1024
ROOM = (MIGRoom("1g.10gb", 9984), MIGRoom("2g.20gb", 20096), MIGRoom("3g.40gb", 40448))
CLUSTER = ClusterFacts(exempt_namespaces=frozenset({"batch-legacy"}), mig_room=ROOM)


def pod(namespace="ml", *, labels=None, annotations=None, **facts) -> PodFacts:
    return PodFacts(namespace=namespace, labels=labels or {}, annotations=annotations or {}, **facts)


# ---- opt-outs and exemptions ------------------------------------------------------------------

@pytest.mark.parametrize(("facts", "action", "sharing", "reason"), [
    # an exempt namespace is left alone, whatever policy would select it
    (pod("batch-legacy"), Action.LEAVE, None, "namespace batch-legacy is exempt"),
    # optimize: "false" as a label or an annotation, any case
    (pod(labels={"gpuplane.io/optimize": "false"}), Action.LEAVE, None, "opts out"),
    (pod(annotations={"gpuplane.io/optimize": "False"}), Action.LEAVE, None, "opts out"),
    # optimize: "true" is no opt-out: the policy applies
    (pod(labels={"gpuplane.io/optimize": "true"}), Action.PLACE, SharingRequest.MPS, "policy everything-mps"),
    # sharing: disabled -> placed, but on whole GPUs, even where MIG would fit
    (pod(labels={"gpuplane.io/sharing": "disabled"}, gpu_memory_mib=5 * GIB), Action.PLACE,
     SharingRequest.EXCLUSIVE, "opts out of sharing"),
    (pod(annotations={"gpuplane.io/sharing": "disabled"}), Action.PLACE, SharingRequest.EXCLUSIVE,
     "opts out of sharing"),
])
def test_it_honours_every_opt_out_and_exemption(facts, action, sharing, reason):
    policies = [PolicyRule("everything-mps", SharingRequest.MPS, precedence=100)]
    choice = choose_sharing(facts, policies, CLUSTER)
    assert choice.action == action
    if sharing is not None:
        assert choice.sharing == sharing
    assert reason in choice.reason


def test_an_exempt_namespace_wins_over_the_opt_in_labels():
    facts = pod("batch-legacy", labels={"gpuplane.io/optimize": "true"})
    assert choose_sharing(facts, [], CLUSTER).action == Action.LEAVE


# ---- seed 003's defaults ----------------------------------------------------------------------

@pytest.mark.parametrize(("labels", "facts", "sharing", "profile"), [
    # training -> exclusive, even when small
    ({"gpuplane.io/workload-type": "training"}, {"gpu_memory_mib": 4 * GIB}, SharingRequest.EXCLUSIVE, ""),
    # one GPU, 8 GB stated (< 20 GB) and MIG room -> the smallest fitting profile: 1g.10gb (9,984 MiB >= 8,192)
    ({"gpuplane.io/workload-type": "inference"}, {"gpu_memory_mib": 8 * GIB}, SharingRequest.MIG, "1g.10gb"),
    # 12 GB -> 1g.10gb is too small (9,984 < 12,288): 2g.20gb
    ({"gpuplane.io/workload-type": "batch"}, {"gpu_memory_mib": 12 * GIB}, SharingRequest.MIG, "2g.20gb"),
    # 20 GB is not below 20 GB -> no MIG: inference -> MPS
    ({"gpuplane.io/workload-type": "inference"}, {"gpu_memory_mib": 20 * GIB}, SharingRequest.MPS, ""),
    ({"gpuplane.io/workload-type": "serving"}, {}, SharingRequest.MPS, ""),
    # two GPUs: no MIG, and MPS refuses requests for more than one -> exclusive
    ({"gpuplane.io/workload-type": "serving"}, {"gpu_count": 2, "gpu_memory_mib": 8 * GIB},
     SharingRequest.EXCLUSIVE, ""),
    # development / batch -> time-slicing
    ({"gpuplane.io/workload-type": "development"}, {}, SharingRequest.TIMESLICE, ""),
    ({"gpuplane.io/workload-type": "batch"}, {"gpu_memory_mib": 30 * GIB}, SharingRequest.TIMESLICE, ""),
    # no (or an unknown) workload type: taken as inference
    ({}, {}, SharingRequest.MPS, ""),
    ({"gpuplane.io/workload-type": "rocket-science"}, {}, SharingRequest.MPS, ""),
])
def test_it_follows_seed_003_when_no_policy_matches(labels, facts, sharing, profile):
    choice = choose_sharing(pod(labels=labels, **facts), [], CLUSTER)
    assert (choice.action, choice.sharing, choice.mig_profile) == (Action.PLACE, sharing, profile)
    assert choice.policy == "" and choice.reason


@pytest.mark.parametrize(("gpu_memory_mib", "host_memory_mib", "sharing"), [
    # 8 GB of GPU memory with 64 GB of host RAM: MIG (the RAM is not what a MIG slice holds)
    (8 * GIB, 64 * GIB, SharingRequest.MIG),
    # 8 GB of host RAM and no GPU memory stated: seed 003 would have taken MIG from the RAM; we do not
    (None, 8 * GIB, SharingRequest.MPS),
    # 40 GB of GPU memory with a small RAM request: no MIG under the 20 GB rule
    (40 * GIB, 2 * GIB, SharingRequest.MPS),
])
def test_the_20_gb_rule_reads_gpu_memory_never_host_ram(gpu_memory_mib, host_memory_mib, sharing):
    facts = pod(gpu_memory_mib=gpu_memory_mib, host_memory_mib=host_memory_mib,
                labels={"gpuplane.io/workload-type": "inference"})
    assert choose_sharing(facts, [], CLUSTER).sharing == sharing


def test_without_mig_room_a_small_pod_goes_on_to_mps_and_says_why():
    choice = choose_sharing(pod(gpu_memory_mib=4 * GIB), [], ClusterFacts())
    assert choice.sharing == SharingRequest.MPS
    assert any("no free MIG instance" in r for r in choice.refused)


# ---- policies and precedence ------------------------------------------------------------------

POLICIES = [
    PolicyRule("team-a-timeslice", SharingRequest.TIMESLICE, precedence=10, namespaces=("team-a",),
               timeslice_replicas=4),
    PolicyRule("gold-exclusive", SharingRequest.EXCLUSIVE, precedence=50, match_labels={"tier": "gold"}),
    PolicyRule("all-mps", SharingRequest.MPS, precedence=1, mps_max_clients=8, mps_memory_limit_mib=16 * GIB),
    # same precedence as all-mps: the name breaks the tie ("a-..." < "all-mps")
    PolicyRule("a-first-mig", SharingRequest.MIG, precedence=1, namespaces=("vision",)),
]


@pytest.mark.parametrize(("facts", "policy", "sharing"), [
    (pod("team-a"), "team-a-timeslice", SharingRequest.TIMESLICE),
    # gold (50) outranks team-a (10)
    (pod("team-a", labels={"tier": "gold"}), "gold-exclusive", SharingRequest.EXCLUSIVE),
    (pod("elsewhere"), "all-mps", SharingRequest.MPS),
    # a label that does not match leaves the gold policy out
    (pod("elsewhere", labels={"tier": "silver"}), "all-mps", SharingRequest.MPS),
    (pod("vision", gpu_memory_mib=6 * GIB), "a-first-mig", SharingRequest.MIG),
    # vision's MIG for 60 GB: no free instance fits -> refused; all-mps caps MPS memory at 16 GB ->
    # refused; seed 003's default (inference -> MPS) decides
    (pod("vision", gpu_memory_mib=60 * GIB), "", SharingRequest.MPS),
])
def test_the_matching_policy_of_highest_precedence_decides(facts, policy, sharing):
    choice = choose_sharing(facts, POLICIES, CLUSTER)
    assert (choice.policy, choice.sharing) == (policy, sharing)
    assert f"policy {policy}" in choice.reason if policy else len(choice.refused) == 2


def test_a_policy_carries_its_settings_into_the_choice():
    choice = choose_sharing(pod("elsewhere"), POLICIES, CLUSTER)
    assert (choice.mps_max_clients, choice.mps_memory_limit_mib) == (8, 16 * GIB)
    assert choose_sharing(pod("team-a"), POLICIES, CLUSTER).timeslice_replicas == 4


# ---- refusals by NVIDIA's limits --------------------------------------------------------------

def test_mps_asked_on_a_mig_node_is_refused():
    mps = [PolicyRule("mps-everywhere", SharingRequest.MPS, precedence=5)]
    on_mig = ClusterFacts(mig_room=ROOM, pinned_mode=SharingMode.MIG)
    choice = choose_sharing(pod(pinned_node="a100-mig-1", gpu_memory_mib=30 * GIB), mps, on_mig)
    assert choice.sharing != SharingRequest.MPS
    assert choice.refused[0].startswith("policy mps-everywhere (MPS (uniform)) refused: MPS runs on full GPUs only")
    # ...and a pod that asks for a MIG device itself never gets MPS either
    assert choose_sharing(pod(mig_profile="1g.10gb"), mps, CLUSTER).sharing == SharingRequest.MIG


@pytest.mark.parametrize(("clients", "capability", "refused"), [
    (60, (8, 0), True),   # 60 > 48 clients on one GPU
    (48, (8, 0), False),
    (48, (7, 0), True),   # Volta: 16
    (16, (7, 0), False),
    (1, (8, 0), True),    # one client is no sharing
])
def test_mps_client_counts_beyond_what_cuda_mps_serves_are_refused(clients, capability, refused):
    policy = [PolicyRule("crowded", SharingRequest.MPS, precedence=5, mps_max_clients=clients)]
    choice = choose_sharing(pod(), policy, ClusterFacts(pinned_compute_capability=capability))
    assert (choice.policy != "crowded") == refused
    if refused:
        assert "clients per GPU" in choice.refused[0] and str(clients) in choice.refused[0]


def test_an_mps_memory_limit_below_the_pods_need_is_refused():
    policy = [PolicyRule("tight", SharingRequest.MPS, precedence=5, mps_memory_limit_mib=4 * GIB)]
    choice = choose_sharing(pod(gpu_memory_mib=30 * GIB), policy, CLUSTER)
    assert choice.policy == "" and "pinned memory limit" in choice.refused[0]


def test_time_slicing_of_one_replica_or_several_gpus_is_refused():
    one = [PolicyRule("one", SharingRequest.TIMESLICE, precedence=5, timeslice_replicas=1)]
    assert "2 to 16 replicas" in choose_sharing(pod(), one, CLUSTER).refused[0]
    four = [PolicyRule("four", SharingRequest.TIMESLICE, precedence=5, timeslice_replicas=4)]
    choice = choose_sharing(pod(gpu_count=2), four, CLUSTER)
    assert choice.sharing == SharingRequest.EXCLUSIVE and "failRequestsGreaterThanOne" in choice.refused[0]


def test_mig_is_refused_on_a_node_in_another_mode():
    mig = [PolicyRule("mig", SharingRequest.MIG, precedence=5, mig_profile="1g.10gb")]
    choice = choose_sharing(pod(gpu_memory_mib=4 * GIB), mig, ClusterFacts(mig_room=ROOM,
                                                                          pinned_mode=SharingMode.EXCLUSIVE))
    assert choice.policy == "" and "not MIG" in choice.refused[0]


# ---- time-slicing replicas from utilization (seed 003's table) --------------------------------

@pytest.mark.parametrize(("utilization", "burstiness", "replicas"), [
    (10, 80, 8),    # < 20 % and > 70 % bursty
    (10, 60, 4),    # < 20 % but only 60 % bursty: the next row (< 40 %, > 50 %)
    (30, 60, 4),    # 20-40 % and > 50 %
    (30, 40, 2),    # 20-40 % but steady: up to 60 % -> 2
    (50, 90, 2),    # 40-60 %
    (60, 0, 2),
    (61, 90, 1),    # > 60 %: no sharing
    (None, None, 4),  # nothing observed: the default
])
def test_timeslice_replicas_follow_seed_003s_table(utilization, burstiness, replicas):
    assert timeslice_replicas(utilization, burstiness)[0] == replicas


def test_a_busy_development_pod_gets_a_whole_gpu():
    facts = pod(labels={"gpuplane.io/workload-type": "development"}, utilization_pct=85, burstiness_pct=10)
    choice = choose_sharing(facts, [], CLUSTER)
    assert choice.sharing == SharingRequest.EXCLUSIVE and "not shared" in choice.reason
