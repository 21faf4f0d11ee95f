"""Diagnosis rendering, kube-scheduler style."""
from __future__ import annotations

from scheduler.core import Diagnosis


def test_it_renders_counts_most_first():
    diagnosis = Diagnosis(12, 0, {"cordoned": 3, "insufficient GPU memory": 5, "utilization >= 90%": 4})
    assert diagnosis.message() == "0/12 nodes are available: 5 insufficient GPU memory, 4 utilization >= 90%, 3 cordoned"


def test_equal_counts_are_ordered_alphabetically_for_a_stable_message():
    diagnosis = Diagnosis(5, 1, {"node not ready": 2, "cordoned": 2})
    assert str(diagnosis) == "1/5 nodes are available: 2 cordoned, 2 node not ready"


def test_without_rejections_there_is_no_reasons_part():
    assert Diagnosis(4, 4).message() == "4/4 nodes are available"
    assert Diagnosis(0, 0).message() == "0/0 nodes are available"


def test_to_dict_carries_the_message_and_ordered_counts():
    data = Diagnosis(3, 1, {"b": 1, "a": 1}).to_dict()
    assert data == {"total_nodes": 3, "available": 1, "rejected": {"a": 1, "b": 1},
                    "message": "1/3 nodes are available: 1 a, 1 b"}
    assert list(data["rejected"]) == ["a", "b"]
