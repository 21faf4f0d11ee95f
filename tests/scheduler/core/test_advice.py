"""Explaining a replica that found no node: the dominant reason, a checked suggestion, the
failing replica named and judged without its own request's tentative reservations."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from nodes.vocabulary import PartitionKind
from scheduler.core import ClusterSnapshot, Outcome, SharingRequest, scheduler_for
from scheduler.core.advice import explain_unplaced
from scheduler.core.diagnosis import HARDWARE_GPUS, HARDWARE_MEMORY, HELD_BY_REQUEST
from scheduler.core.limits import largest_gpu_mib
from scheduler.core.wording import gb
from tests.scheduler.core.builders import H100, demo_nodes, demo_snapshot, make_node, occupy, request


def _same(left: ClusterSnapshot, right: ClusterSnapshot) -> bool:
    a, b = left.columns(), right.columns()
    return a.keys() == b.keys() and all(
        np.array_equal(a[name], b[name], equal_nan=a[name].dtype.kind == "f") for name in a)


def test_a_gpu_too_small_is_the_reason_whatever_the_sharing_mode_says():
    result = scheduler_for().schedule(request(120, allow_default_scheduler=False), demo_snapshot())

    assert result.outcome == Outcome.UNSCHEDULABLE
    # Not "MPS share too small" or "time-slice share too small" for the shared A100s: no 40 GB
    # GPU could hold 120 GB in any mode.
    assert dict(result.diagnosis.rejected) == {HARDWARE_MEMORY: 12}
    assert result.message == "0/12 nodes are available: 12 nodes have insufficient GPU memory"
    for row in result.rejected_rows:
        assert "MiB" not in row.detail
        assert row.detail.endswith("the replica needs 120 GB on one GPU")


def test_the_suggestion_was_checked_and_following_it_places_the_request():
    scheduler = scheduler_for()
    snapshot = demo_snapshot()
    before = demo_snapshot()
    asked = request(120, allow_default_scheduler=False)

    unplaced = explain_unplaced(scheduler, snapshot, [asked], 0, [])

    assert unplaced.reason == HARDWARE_MEMORY
    assert unplaced.lead == "no GPU of this cluster can hold 120 GB"
    assert unplaced.suggestion is not None
    assert unplaced.suggestion.changes == {"gpu_count": 2}
    assert unplaced.suggestion.text == (f"the largest GPU has {gb(largest_gpu_mib(snapshot))}: "
                                        "ask for 2 GPUs per replica (60 GB on each)")
    assert unplaced.message().startswith("No GPU of this cluster can hold 120 GB. Suggestion: the largest GPU has ")
    assert _same(snapshot, before)  # checking it reserved nothing for good
    followed = scheduler.schedule(replace(asked, gpu_count=2), snapshot)
    assert followed.outcome == Outcome.PLACED and len(followed.assignment.gpu_indexes) == 2


def test_a_shared_only_request_is_told_to_let_the_scheduler_choose_as_well():
    scheduler = scheduler_for()
    snapshot = demo_snapshot()
    asked = request(120, sharing=SharingRequest.MPS, allow_default_scheduler=False)

    unplaced = explain_unplaced(scheduler, snapshot, [asked], 0, [])

    assert unplaced.suggestion is not None
    assert unplaced.suggestion.changes == {"gpu_count": 2, "sharing": "auto"}
    changed = replace(asked, gpu_count=2, sharing=SharingRequest.AUTO)
    assert scheduler.schedule(changed, snapshot).outcome == Outcome.PLACED


def test_no_suggestion_rather_than_one_that_would_not_work():
    nodes = demo_nodes()
    for node in nodes[:4]:  # every H100 GPU held: 2 GPUs of 80 GB exist, but none is free
        for gpu in range(2):
            occupy(node, gpu, 1000, 40960, f"other/pod-{node.name}-{gpu}", PartitionKind.EXCLUSIVE)
    snapshot = ClusterSnapshot(nodes)

    unplaced = explain_unplaced(scheduler_for(), snapshot, [request(120, allow_default_scheduler=False)], 0, [])

    assert unplaced.suggestion is None
    assert unplaced.lead == f"no GPU of this cluster can hold 120 GB: the largest has {gb(largest_gpu_mib(snapshot))}"
    assert "Suggestion" not in unplaced.message()


def test_a_gang_larger_than_any_node_is_told_the_largest_node():
    snapshot = demo_snapshot()
    asked = request(60, gpu_count=4, allow_default_scheduler=False)

    unplaced = explain_unplaced(scheduler_for(), snapshot, [asked], 0, [])

    assert unplaced.lead == "no node of this cluster has 4 GPUs"
    assert unplaced.suggestion is not None
    assert unplaced.suggestion.changes == {"gpu_count": 2}
    assert unplaced.suggestion.text == "the largest node has 2 GPUs: ask for 2 GPUs per replica (30 GB on each)"


def test_the_failing_replica_is_named_and_judged_without_its_own_request_reservations():
    scheduler = scheduler_for()
    nodes = [make_node(f"h100-{i}", H100) for i in range(1, 4)] + [make_node("small", gpus=2)]
    snapshot = ClusterSnapshot(nodes)
    before = ClusterSnapshot([make_node(f"h100-{i}", H100) for i in range(1, 4)] + [make_node("small", gpus=2)])
    requests = [request(70, key=f"team/big#{i}", allow_default_scheduler=False) for i in range(8)]
    held = []
    for asked in requests:  # as the services decide: each replica sees the ones before it
        result = scheduler.schedule(asked, snapshot)
        if result.outcome != Outcome.PLACED:
            break
        held.append(result.assignment)
    assert len(held) == 6  # 3 nodes x 2 GPUs of 80 GB

    unplaced = explain_unplaced(scheduler, snapshot, requests, len(held), held)

    assert _same(snapshot, before)  # the earlier replicas' tentative reservations were released
    assert (unplaced.replica, unplaced.replicas, unplaced.released) == (7, 8, 6)
    assert unplaced.message().startswith(
        "Replica 7 of 8 could not be placed; the 6 earlier replicas' tentative reservations were released. "
        "The cluster has room for 6 replicas of this size now: 3 nodes have capacity held only by this "
        "request's earlier replicas. Suggestion: ask for 6 replicas. 0/4 nodes are available: "
    )
    reasons = {row.node: row.reason for row in unplaced.result.rejected_rows}
    # The H100s are not blamed for being full: only this request filled them.
    assert reasons == {"h100-1": HELD_BY_REQUEST, "h100-2": HELD_BY_REQUEST, "h100-3": HELD_BY_REQUEST,
                       "small": HARDWARE_MEMORY}
    assert unplaced.suggestion is not None and unplaced.suggestion.changes == {"replicas": 6}


def test_a_gang_short_of_free_gpus_is_told_why_and_a_smaller_gang_that_fits():
    nodes = [make_node(f"h100-{i}", H100) for i in range(1, 4)] + [make_node("small", gpus=1)]
    for node in nodes[:3]:  # one of the two GPUs of every H100 node is held
        occupy(node, 0, 1000, 40960, f"other/pod-{node.name}", PartitionKind.EXCLUSIVE)
    snapshot = ClusterSnapshot(nodes)
    asked = request(60, gpu_count=2, allow_default_scheduler=False)

    unplaced = explain_unplaced(scheduler_for(), snapshot, [asked], 0, [])

    # The small node could never hold a gang of 2; the H100s could, were a second GPU free.
    assert dict(unplaced.result.diagnosis.rejected) == {"not enough free GPUs for the gang": 3, HARDWARE_GPUS: 1}
    assert unplaced.reason == "not enough free GPUs for the gang"
    assert unplaced.lead == "3 nodes have too few free GPUs for the gang (h100-1: needs 2 free whole GPUs; 1 is free)"
    assert unplaced.suggestion is not None
    assert unplaced.suggestion.changes == {"gpu_count": 1}
    assert unplaced.suggestion.text == "no node has 2 free GPUs: ask for 1 GPU per replica"
    assert scheduler_for().schedule(replace(asked, gpu_count=1), snapshot).outcome == Outcome.PLACED
