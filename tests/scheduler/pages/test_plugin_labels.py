"""Score plugins in words on the decision page (scheduler/plugin_labels.py, pure)."""
from __future__ import annotations

import re

import pytest

from scheduler.core.profiles import PROFILES
from scheduler.matrix_view import matrix_table
from scheduler.plugin_labels import plugin_label, words


@pytest.mark.parametrize(
    ("plugin", "priority", "raw", "title", "raw_text"),
    [
        # H100-SXM5: 989 TFLOPS at 700 W = 1412 TFLOPS per kW (the plugin stores milli-TFLOPS per W).
        ("PowerEfficiency", "medium", 1412, "Power efficiency", "1412 TFLOPS per kW"),
        ("BestFit", "medium", 88, "Best fit", "88 % in use"),
        ("LeastUtilized", "medium", 45, "Least utilized", "45 % idle"),
        ("PartitionCompat", "medium", 87, "Partition fit", "87 % of the unit"),
        ("WorkloadAffinity", "medium", 15, "Workload affinity", "15 % match"),
        ("FragmentationGradient", "medium", -50, "Fragmentation", "-50 milli-GPU"),
        ("SharingPlan", "medium", 1, "Sharing plan", "on plan"),
        ("SharingPlan", "medium", 0, "Sharing plan", "off plan"),
        # PriorityPower measures what the priority asks for.
        ("PriorityPower", "high", 989, "Priority: speed", "989 TFLOPS"),
        ("PriorityPower", "low", 700, "Priority: power", "700 W"),
        ("PriorityPower", "medium", 50, "Priority", "50"),
    ],
)
def test_each_plugin_reads_in_words_with_the_unit_of_its_raw_value(plugin, priority, raw, title, raw_text):
    label = plugin_label(plugin, priority)

    assert label.title == title
    assert label.raw_text(raw) == raw_text
    assert label.meaning


def test_every_score_plugin_of_the_built_in_profiles_has_a_label_with_a_unit():
    for profile in PROFILES.values():
        for plugin in profile["scores"]:
            for priority in ("high", "low"):
                label = plugin_label(plugin, priority)
                assert label.unit, f"{plugin} has no unit for its raw value"
                assert not re.search(r"[a-z][A-Z]", label.title), f"{label.title!r} is not in words"


def test_an_unknown_plugin_gets_its_name_in_words_and_a_bare_number():
    label = plugin_label("GPUMemoryHeadroom")

    assert label.title == "GPU memory headroom"
    assert label.raw_text(7) == "7"
    assert words("PowerEfficiency") == "Power efficiency"


def test_the_matrix_table_carries_titles_and_raw_values_in_units():
    matrix = {
        "outcome": "placed", "node": "h100", "request": {"priority": "low"},
        "weights": {"PowerEfficiency": 0.6, "PriorityPower": 0.4},
        "rows": [{"node": "h100", "feasible": True, "rank": 1, "total": 80.0, "scores": [
            {"plugin": "PowerEfficiency", "raw": 1412, "normalized": 100, "weight": 0.6, "weighted": 60.0},
            {"plugin": "PriorityPower", "raw": 700, "normalized": 50, "weight": 0.4, "weighted": 20.0},
        ]}],
    }

    table = matrix_table(matrix, {})

    assert [column.label.title for column in table.columns] == ["Power efficiency", "Priority: power"]
    assert [cell.raw_text for cell in table.rows[0].scores] == ["1412 TFLOPS per kW", "700 W"]
    assert table.chart_labels == {
        "PowerEfficiency": {"title": "Power efficiency", "unit": "TFLOPS per kW"},
        "PriorityPower": {"title": "Priority: power", "unit": "W"},
    }
