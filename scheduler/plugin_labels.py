"""Score plugins in words for the decision page: a title, and each raw value with its unit.

The core names plugins in CamelCase (`PowerEfficiency`) and stores integer raw values in the
plugin's own unit (scheduler/core/plugins/*, each documents its formula). People read "Power
efficiency" and "1412 TFLOPS per kW". A plugin this table does not know (a matrix stored by an
older or newer version) gets its name split into words and its raw value without a unit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PluginLabel:
    """How one plugin reads on the page: `unit` follows the raw value ("" for none); `meaning`
    says what the raw value measures (a tooltip); `values` words raw values that stand for a
    verdict rather than a quantity (SharingPlan's 1 and 0)."""

    title: str
    unit: str
    meaning: str
    values: tuple[tuple[int, str], ...] = ()

    def raw_text(self, raw: int) -> str:
        """"1412 TFLOPS per kW", "88 %", "-50 milli-GPU", "on plan"; the bare number when there is no unit."""
        worded = dict(self.values).get(raw)
        if worded is not None:
            return worded
        if not self.unit:
            return str(raw)
        return f"{raw} {self.unit}"


_LABELS: dict[str, PluginLabel] = {
    "BestFit": PluginLabel("Best fit", "% in use", "the node's GPU capacity in use once this placement is made"),
    "FragmentationGradient": PluginLabel(
        "Fragmentation", "milli-GPU",
        "how much the placement lowers the free GPU capacity the workload's typical pods could not use "
        "(negative: capacity it strands; a node's GPUs count only as far as its CPU left can feed them), in "
        "thousandths of a GPU; scored 100 / (1 + e^(-x / 1000)): 0 -> 50, +200 -> 54, -500 -> 37",
    ),
    "SharingPlan": PluginLabel(
        "Sharing plan", "planned step",
        "whether the share goes to a GPU on its way to a GPU content the observed workload's sharing plan holds "
        "(e.g. 650 + 320 milli): on plan 100, off plan 0; a whole GPU or a fixed-size unit is never off plan",
        values=((1, "on plan"), (0, "off plan")),
    ),
    "LeastUtilized": PluginLabel(
        "Least utilized", "% idle", "100 minus the node's mean GPU load (the higher of measured and allocated)",
    ),
    "PartitionCompat": PluginLabel(
        "Partition fit", "% of the unit",
        "the request's share of the unit it would get (halved on time-slicing, which isolates nothing)",
    ),
    "PowerEfficiency": PluginLabel("Power efficiency", "TFLOPS per kW", "FP16 dense TFLOPS per kW of the GPU's TDP"),
    "WorkloadAffinity": PluginLabel(
        "Workload affinity", "% match", "100 on the workload's preferred GPU, less the further its TFLOPS are from it",
    ),
}

# PriorityPower measures what the request's priority asks for (scheduler/core/plugins/priority_power.py).
_PRIORITY_POWER: dict[str, PluginLabel] = {
    "high": PluginLabel("Priority: speed", "TFLOPS", "FP16 dense TFLOPS: a high-priority request prefers the fastest GPU"),
    "low": PluginLabel("Priority: power", "W", "the GPU's TDP: a low-priority request prefers the least power"),
    "medium": PluginLabel("Priority", "", "a medium-priority request has no preference (50 on every node)"),
}

_CAMEL_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def words(name: str) -> str:
    """"PowerEfficiency" -> "Power efficiency", "GPUMemoryFit" -> "GPU memory fit"."""
    parts = _CAMEL_WORD.findall(name) or [name]
    rest = [part if part.isupper() else part.lower() for part in parts[1:]]
    return " ".join([parts[0], *rest])


def plugin_label(plugin: str, priority: str = "") -> PluginLabel:
    """The label of `plugin` in a decision made for a request of `priority` ("high", "medium", "low")."""
    if plugin == "PriorityPower":
        return _PRIORITY_POWER.get(priority, PluginLabel("Priority", "", "depends on the request's priority"))
    return _LABELS.get(plugin) or PluginLabel(words(plugin), "", "")
