"""Diagnosis rendering: kube-scheduler's counts, in sentences whose verbs agree with them."""
from __future__ import annotations

from scheduler.core import Diagnosis
from scheduler.core.diagnosis import counted_reason


def test_it_renders_counts_most_first():
    diagnosis = Diagnosis(12, 0, {"cordoned": 3, "insufficient GPU memory": 5, "utilization >= 90%": 4})
    assert diagnosis.message() == ("0/12 nodes are available: 5 nodes have insufficient GPU memory, "
                                   "4 nodes have mean GPU utilization >= 90%, 3 nodes are cordoned")


def test_equal_counts_are_ordered_alphabetically_for_a_stable_message():
    diagnosis = Diagnosis(5, 1, {"node not ready": 2, "cordoned": 2})
    assert str(diagnosis) == "1/5 nodes are available: 2 nodes are cordoned, 2 nodes are not ready"


def test_a_hardware_reason_leads_on_equal_counts_and_is_the_dominant_one():
    diagnosis = Diagnosis(4, 0, {"cordoned": 2, "insufficient GPU memory": 2})
    assert diagnosis.ordered()[0] == ("insufficient GPU memory", 2)
    assert diagnosis.dominant() == ("insufficient GPU memory", 2)
    assert Diagnosis(3, 0, {"cordoned": 1, "node not ready": 2}).dominant() == ("node not ready", 2)
    assert Diagnosis(3, 3).dominant() is None


def test_the_verb_agrees_with_the_count():
    assert counted_reason("insufficient GPU memory", 1) == "1 node has insufficient GPU memory"
    assert counted_reason("insufficient GPU memory", 2) == "2 nodes have insufficient GPU memory"
    assert counted_reason("cordoned", 1) == "1 node is cordoned"
    assert counted_reason("node not ready", 3) == "3 nodes are not ready"
    assert counted_reason("some new reason", 1) == "1 node is ruled out: some new reason"


def test_without_rejections_there_is_no_reasons_part():
    assert Diagnosis(4, 4).message() == "4/4 nodes are available"
    assert Diagnosis(0, 0).message() == "0/0 nodes are available"


def test_to_dict_carries_the_message_and_ordered_counts():
    data = Diagnosis(3, 1, {"b": 1, "a": 1}).to_dict()
    assert data == {"total_nodes": 3, "available": 1, "rejected": {"a": 1, "b": 1},
                    "message": "1/3 nodes are available: 1 node is ruled out: a, 1 node is ruled out: b"}
    assert list(data["rejected"]) == ["a", "b"]
