"""The core's words for people: GB, percent, and counts whose verbs agree."""
from __future__ import annotations

from scheduler.core.wording import counted, gb, gpus, nodes_that, percent


def test_memory_is_said_in_gb_to_a_tenth():
    assert gb(81920) == "80 GB"
    assert gb(1536) == "1.5 GB"
    assert gb(81559) == "79.6 GB"


def test_shares_are_rounded_percentages():
    assert percent(250) == "25%"
    assert percent(428) == "43%"


def test_compute_is_said_in_gpus():
    assert gpus(1000) == "1 GPU"
    assert gpus(2500) == "2.5 GPUs"
    assert gpus(250) == "0.25 GPU"
    assert gpus(428) == "0.428 GPU"
    assert gpus(0) == "0 GPUs"


def test_counts_agree_with_their_nouns_and_verbs():
    assert counted(1, "replica") == "1 replica"
    assert counted(3, "replica") == "3 replicas"
    assert counted(0, "node") == "0 nodes"
    assert nodes_that(1, "has", "have") == "1 node has"
    assert nodes_that(2, "has", "have") == "2 nodes have"
