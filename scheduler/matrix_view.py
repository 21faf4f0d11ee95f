"""How a stored decision matrix is shown on the deployment and deploy pages: verdicts, per-plugin
columns in words and units, what the truncated matrix left out, and the "why nothing fits" rows.
Pure functions over the stored matrix, so that templates stay free of arithmetic."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.core.diagnosis import counted_reason
from scheduler.plugin_labels import PluginLabel, plugin_label

CHART_TOP_NODES = 10  # bars in the score chart; the table below it has every kept row

def _count_phrase(pairs: Sequence[tuple[str, int]]) -> str:
    return ", ".join(counted_reason(reason, count) for reason, count in pairs)


# ---- the decision matrix, as the page shows it -------------------------------------------------


def by_weight(weights: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """A profile's (plugin, weight) pairs, heaviest first, ties by name (static/js/decision_matrix.js
    orders its legend the same way)."""
    return tuple(sorted(((str(p), float(w)) for p, w in weights.items()), key=lambda item: (-item[1], item[0])))


def by_count(rejected: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Rejection (reason, count) pairs, most nodes first, ties by reason (core Diagnosis.ordered)."""
    return tuple(sorted(((str(r), int(c)) for r, c in rejected.items()), key=lambda item: (-item[1], item[0])))


@dataclass(frozen=True)
class ScoreCell:
    """One plugin's part of a node's total: raw value, normalized 0..100, weighted contribution;
    `raw_text` is the raw value in the plugin's unit ("1412 TFLOPS per kW")."""

    raw: int
    normalized: int
    weighted: float
    raw_text: str = ""


@dataclass(frozen=True)
class PluginColumn:
    """One score plugin of the matrix: its name in the stored matrix, weight, and label in words."""

    plugin: str
    weight: float
    label: PluginLabel


@dataclass(frozen=True)
class MatrixRow:
    """One kept node of a decision: `verdict` is "chosen", "feasible" or "rejected"."""

    node: str
    node_url: str | None  # None when the node is gone from the inventory
    verdict: str
    rank: int | None
    total: float | None
    scores: tuple[ScoreCell | None, ...]  # aligned with MatrixTable.plugins; None: not scored
    reason: str = ""
    detail: str = ""
    gpu_model: str = ""
    sharing_mode: str = ""
    host_free: str = ""  # "60 CPU, 240 GiB free" before the placement; "" where unknown

    @property
    def is_chosen(self) -> bool:
        return self.verdict == "chosen"


@dataclass(frozen=True)
class MatrixTable:
    """A stored decision (core `ScheduleResult.to_dict()`) laid out for the page.

    `hidden_feasible` counts feasible nodes scored but not kept (below the profile's top_k);
    `hidden_rejected` counts, per reason, rejected nodes with no example row, so that kept rows
    plus hidden counts account for every node of the cluster.
    """

    outcome: str
    message: str
    profile: str
    weights: tuple[tuple[str, float], ...]
    rows: tuple[MatrixRow, ...]
    total_nodes: int
    available: int
    rejected: tuple[tuple[str, int], ...]
    hidden_feasible: int
    hidden_rejected: tuple[tuple[str, int], ...]
    classification: str = ""
    sizing: str = ""
    columns: tuple[PluginColumn, ...] = ()  # aligned with `weights`
    host_request: str = ""  # "4 CPU and 16 GiB of host memory per replica"
    total_scale: int = 100

    @property
    def chart_labels(self) -> dict[str, dict[str, str]]:
        """Per plugin, its title and raw unit, for the score chart's legend and tooltips."""
        return {c.plugin: {"title": c.label.title, "unit": c.label.unit} for c in self.columns}

    @property
    def plugins(self) -> tuple[str, ...]:
        return tuple(plugin for plugin, _ in self.weights)

    @property
    def has_scores(self) -> bool:
        """Whether any kept row was scored (a chart is worth drawing)."""
        return any(row.verdict != "rejected" for row in self.rows)

    @property
    def hidden_rejected_n(self) -> int:
        return sum(count for _, count in self.hidden_rejected)

    @property
    def hidden_rejected_text(self) -> str:
        """"5 nodes have insufficient GPU memory, 1 node is cordoned" for the rejected nodes the matrix
        has no row for."""
        return _count_phrase(self.hidden_rejected)

    @property
    def rejected_text(self) -> str:
        return _count_phrase(self.rejected)


def matrix_table(matrix: Mapping[str, Any], node_urls: Mapping[str, str]) -> MatrixTable:
    """Lay out a stored decision matrix (core `ScheduleResult.to_dict()` shape) for the page.

    Plugin columns go by weight, heaviest first (ties by name): stored JSON need not keep key
    order (PostgreSQL's jsonb does not). A row's scores are matched to columns by plugin name, so
    a row that lacks a plugin shows a gap rather than a shifted column. Rejection reasons go
    most nodes first, as in the diagnosis message. The chosen row is the one naming the decided node when the outcome is
    "placed"; a node missing from `node_urls` is shown without a link.
    """
    weights = by_weight(matrix.get("weights") or {})
    plugins = [plugin for plugin, _ in weights]
    priority = str((matrix.get("request") or {}).get("priority", ""))
    labels = {plugin: plugin_label(plugin, priority) for plugin in plugins}
    chosen = matrix.get("node") if matrix.get("outcome") == "placed" else None
    rows: list[MatrixRow] = []
    for row in matrix.get("rows") or []:
        by_plugin = {score["plugin"]: score for score in row.get("scores") or []}
        cells = tuple(
            ScoreCell(int(s["raw"]), int(s["normalized"]), float(s["weighted"]), labels[p].raw_text(int(s["raw"])))
            if (s := by_plugin.get(p)) else None
            for p in plugins
        )
        if not row.get("feasible"):
            verdict = "rejected"
        elif row["node"] == chosen:
            verdict = "chosen"
        else:
            verdict = "feasible"
        facts = row.get("facts") or {}
        rows.append(MatrixRow(
            node=row["node"], node_url=node_urls.get(row["node"]), verdict=verdict, rank=row.get("rank"),
            total=row.get("total"), scores=cells, reason=row.get("reason", ""), detail=row.get("detail", ""),
            gpu_model=str(facts.get("gpu_model", "")), sharing_mode=str(facts.get("sharing_mode", "")),
            host_free=host_free_text(facts.get("cpu_free_milli"), facts.get("memory_free_mib")),
        ))

    diagnosis = matrix.get("diagnosis") or {}
    rejected = by_count(diagnosis.get("rejected") or {})
    shown = Counter(row.reason for row in rows if row.verdict == "rejected")
    hidden_rejected = tuple(
        (reason, count - shown[reason]) for reason, count in rejected if count > shown[reason]
    )
    kept_feasible = sum(1 for row in rows if row.verdict != "rejected")
    classification = matrix.get("classification") or {}
    return MatrixTable(
        outcome=str(matrix.get("outcome", "")),
        message=str(matrix.get("message", "")),
        profile=str(matrix.get("profile", "")),
        weights=weights,
        rows=tuple(rows),
        total_nodes=int(diagnosis.get("total_nodes", 0)),
        available=int(diagnosis.get("available", 0)),
        rejected=rejected,
        hidden_feasible=max(0, int(matrix.get("feasible_nodes") or 0) - kept_feasible),
        hidden_rejected=hidden_rejected,
        classification=str(classification.get("reason", "")),
        sizing=str(matrix.get("sizing") or ""),
        columns=tuple(PluginColumn(plugin, weight, labels[plugin]) for plugin, weight in weights),
        host_request=host_request_text(matrix.get("request") or {}),
        total_scale=int(matrix.get("total_scale") or 100),
    )


def _cores(milli: int) -> str:
    return f"{milli / 1000:g}"


def host_free_text(cpu_milli: Any, memory_mib: Any) -> str:
    """A node's free CPU and host memory before the placement: "60 CPU, 240 GiB free"; "" when
    neither is known (a node whose allocatable the inventory has not read)."""
    parts = []
    if isinstance(cpu_milli, int):
        parts.append(f"{_cores(cpu_milli)} CPU")
    if isinstance(memory_mib, int):
        parts.append(f"{memory_mib / 1024:g} GiB")
    return f"{', '.join(parts)} free" if parts else ""


def host_request_text(request: Mapping[str, Any]) -> str:
    """What each replica's pod requests of its node: "4 CPU and 16 GiB of host memory"; "" for a
    matrix stored before requests stated them."""
    cpu, memory = request.get("cpu_milli"), request.get("host_memory_mib")
    if not isinstance(cpu, int) or not isinstance(memory, int):
        return ""
    return f"{_cores(cpu)} CPU and {memory / 1024:g} GiB of host memory"


@dataclass(frozen=True)
class RejectionRow:
    """One line of the "why nothing fits" table: a reason, how many nodes, and the example nodes
    the matrix kept, grouped by their detail ((detail, (node, ...)), ...) in first-seen order."""

    reason: str
    count: int
    examples: tuple[tuple[str, tuple[str, ...]], ...]


def rejection_rows(matrix: Mapping[str, Any]) -> list[RejectionRow]:
    """Reasons of a failed decision, the dominant one (its explanation's) first, then the
    diagnosis' order (most nodes first), with examples."""
    grouped: dict[str, dict[str, list[str]]] = {}
    for row in matrix.get("rows") or []:
        if not row.get("feasible"):
            details = grouped.setdefault(row.get("reason", ""), {})
            details.setdefault(row.get("detail", ""), []).append(row["node"])
    rejected = by_count((matrix.get("diagnosis") or {}).get("rejected") or {})
    dominant = (matrix.get("explanation") or {}).get("reason")
    rejected = tuple(sorted(rejected, key=lambda item: item[0] != dominant))  # stable: the rest keep their order
    return [
        RejectionRow(reason, count, tuple((detail, tuple(nodes)) for detail, nodes in grouped.get(reason, {}).items()))
        for reason, count in rejected
    ]
