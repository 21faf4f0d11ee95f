"""The decision matrix of one placement: verdicts, per-plugin scores, the choice and why.

Storage stays bounded on large clusters: a decision keeps the best-scored ``top_k`` feasible
nodes with their full score breakdown, a few example rows per rejection reason, and the count of
rejected nodes per reason (``Diagnosis``). On a cluster of at most ``top_k`` nodes every node
has a row. Score rows are materialized lazily from small arrays, so deciding stays cheap and
only reading a decision (``rows``, ``to_dict``) pays for the objects.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

import numpy as np

from nodes.vocabulary import MIB_PER_GB, PartitionKind
from scheduler.core.classify import Classification
from scheduler.core.diagnosis import Diagnosis
from scheduler.core.fit import Need
from scheduler.core.framework import Profile, Status
from scheduler.core.node_columns import KINDS, MODES, UNKNOWN_HOST_FREE
from scheduler.core.sizing import kind_rule, sizing_rule
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import Assignment, PlacementRequest


class Outcome(StrEnum):
    PLACED = "placed"
    UNSCHEDULABLE = "unschedulable"
    DEFAULT_SCHEDULER = "default-scheduler"  # no node affinity: Kubernetes' own scheduler decides


@dataclass(frozen=True)
class PluginScore:
    """One plugin's contribution to a node's total: raw -> normalized 0..100 -> ``weighted`` =
    normalized x weight / (the profile's weights summed), so a node's contributions add up to its
    total, the weighted mean of its normalized scores: 0..100 (``TOTAL_SCALE``)."""

    plugin: str
    raw: int
    normalized: int
    weight: float
    weighted: float

    def to_dict(self) -> dict[str, object]:
        return {
            "plugin": self.plugin,
            "raw": self.raw,
            "normalized": self.normalized,
            "weight": self.weight,
            "weighted": self.weighted,
        }


@dataclass(frozen=True)
class NodeVerdict:
    """One row of the matrix: a node's verdict, its reasons or its scores, and a few facts."""

    node: str
    feasible: bool
    rank: int | None = None  # 1 = chosen (or would have been); None for rejected nodes
    total: float | None = None
    scores: tuple[PluginScore, ...] = ()
    reason: str = ""
    detail: str = ""
    facts: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "feasible": self.feasible,
            "rank": self.rank,
            "total": self.total,
            "scores": [score.to_dict() for score in self.scores],
            "reason": self.reason,
            "detail": self.detail,
            "facts": self.facts or {},
        }


# A node's total is on 0..100 whatever the profile's weights: the weighted mean of its scores.
TOTAL_SCALE = 100
_FACT_COLUMNS = ("model_id", "mode_id", "replicas", "util_pct", "load_pct", "whole_free", "free_milli",
                 "cpu_free_milli", "host_memory_free_mib")


def _facts(model_keys: tuple[str, ...], values: dict[str, np.ndarray], column: int) -> dict[str, object]:
    """A kept node's facts for the matrix, from the values copied when it was scored."""
    return {
        "gpu_model": model_keys[int(values["model_id"][column])] or "unknown",
        "sharing_mode": str(MODES[int(values["mode_id"][column])]),
        "replicas": int(values["replicas"][column]),
        "utilization_pct": round(float(values["util_pct"][column]), 1),
        "load_pct": round(float(values["load_pct"][column]), 1),
        "free_whole_gpus": int(values["whole_free"][column]),
        "free_milli": int(values["free_milli"][column]),
        # Before this placement; None where the node's allocatable is unknown.
        "cpu_free_milli": _host(values["cpu_free_milli"][column]),
        "memory_free_mib": _host(values["host_memory_free_mib"][column]),
    }


def _facts_lists(model_keys: tuple[str, ...], values: dict[str, np.ndarray]) -> list[dict[str, object]]:
    """``_facts`` of every kept node, from each column's ``tolist()`` (same values)."""
    columns = {name: column.tolist() for name, column in values.items()}
    return [
        {
            "gpu_model": model_keys[model_id] or "unknown",
            "sharing_mode": str(MODES[mode_id]),
            "replicas": replicas,
            "utilization_pct": round(util, 1),
            "load_pct": round(load, 1),
            "free_whole_gpus": whole,
            "free_milli": free,
            "cpu_free_milli": None if cpu >= UNKNOWN_HOST_FREE else cpu,
            "memory_free_mib": None if memory >= UNKNOWN_HOST_FREE else memory,
        }
        for model_id, mode_id, replicas, util, load, whole, free, cpu, memory in zip(
            *(columns[name] for name in _FACT_COLUMNS), strict=True)
    ]


def _host(value: np.integer) -> int | None:
    return None if int(value) >= UNKNOWN_HOST_FREE else int(value)


class ScoreMatrix:
    """Scores of the best ``k`` feasible nodes, best first (ties: lower ``tie_rank`` first)."""

    def __init__(self, names: list[str], ids: np.ndarray, raw: np.ndarray, normalized: np.ndarray,
                 weighted_milli: np.ndarray, totals_milli: np.ndarray, plugin_names: tuple[str, ...],
                 weights: tuple[float, ...], weight_scale: int, feasible: int,
                 model_keys: tuple[str, ...], fact_values: dict[str, np.ndarray]) -> None:
        self.names = names
        self.ids = ids
        self.raw = raw
        self.normalized = normalized
        self.weighted_milli = weighted_milli
        self.totals_milli = totals_milli
        self.plugin_names = plugin_names
        self.weights = weights
        self.weight_scale = weight_scale
        self.feasible = feasible
        self._model_keys = model_keys
        self._fact_values = fact_values

    @classmethod
    def top(cls, *, snapshot: ClusterSnapshot, nodes: np.ndarray, raw: np.ndarray, normalized: np.ndarray,
            weights_milli: np.ndarray, totals: np.ndarray, plugin_names: tuple[str, ...],
            weights: tuple[float, ...], k: int, weight_scale: int) -> ScoreMatrix:
        """Select the best ``k`` of ``nodes`` by total, ties broken by the snapshot's ``tie_rank``."""
        count = len(nodes)
        size = len(snapshot)
        # One integer key orders by total, then by tie rank: exact, and argpartition-friendly.
        key = totals * (size + 1) + (size - snapshot.tie_rank.take(nodes))
        if count > k:
            keep = np.argpartition(key, count - k)[count - k:]
            keep = keep[np.argsort(-key[keep], kind="stable")]
        else:
            keep = np.argsort(-key, kind="stable")
        ids = nodes.take(keep)
        normalized_kept = np.take(normalized, keep, axis=1)
        return cls(
            names=[snapshot.names[i] for i in ids.tolist()],
            ids=ids,
            raw=np.take(raw, keep, axis=1),
            normalized=normalized_kept,
            weighted_milli=normalized_kept * weights_milli[:, None],
            totals_milli=totals.take(keep),
            plugin_names=plugin_names,
            weights=weights,
            weight_scale=weight_scale,
            feasible=count,
            model_keys=snapshot.models.keys,
            fact_values={name: getattr(snapshot, name).take(ids) for name in _FACT_COLUMNS},
        )

    def order_ids(self) -> list[int]:
        return self.ids.tolist()

    def row_dicts(self) -> list[dict[str, object]]:
        """``[row.to_dict() for row in self.rows()]``, built from the arrays' ``tolist()`` in one
        pass: the stored matrix of every decision is serialized on the deploy path, and 50 rows x
        7 plugins of dataclasses cost several milliseconds there."""
        scale = max(sum(round(w * self.weight_scale) for w in self.weights), 1)
        raw, normalized, weighted = self.raw.T.tolist(), self.normalized.T.tolist(), self.weighted_milli.T.tolist()
        totals = self.totals_milli.tolist()
        facts = _facts_lists(self._model_keys, self._fact_values)
        plugins = tuple(enumerate(zip(self.plugin_names, self.weights, strict=True)))
        out: list[dict[str, object]] = []
        for column, name in enumerate(self.names):
            raw_c, normalized_c, weighted_c = raw[column], normalized[column], weighted[column]
            out.append({
                "node": name,
                "feasible": True,
                "rank": column + 1,
                "total": round(totals[column] / scale, 3),
                "scores": [{"plugin": plugin, "raw": raw_c[row], "normalized": normalized_c[row], "weight": weight,
                            "weighted": round(weighted_c[row] / scale, 3)} for row, (plugin, weight) in plugins],
                "reason": "",
                "detail": "",
                "facts": facts[column],
            })
        return out

    def rows(self) -> list[NodeVerdict]:
        # Thousandths of a weight x points -> points of the weighted mean (0..TOTAL_SCALE).
        scale = max(sum(round(w * self.weight_scale) for w in self.weights), 1)
        rows = []
        for column, name in enumerate(self.names):
            scores = tuple(
                PluginScore(
                    plugin=plugin,
                    raw=int(self.raw[row, column]),
                    normalized=int(self.normalized[row, column]),
                    weight=self.weights[row],
                    weighted=round(int(self.weighted_milli[row, column]) / scale, 3),
                )
                for row, plugin in enumerate(self.plugin_names)
            )
            rows.append(
                NodeVerdict(
                    node=name,
                    feasible=True,
                    rank=column + 1,
                    total=round(int(self.totals_milli[column]) / scale, 3),
                    scores=scores,
                    facts=_facts(self._model_keys, self._fact_values, column),
                )
            )
        return rows


class ScheduleResult:
    """What one scheduling cycle decided, and the matrix that explains it.

    ``outcome``: placed (``node`` and ``assignment`` set), unschedulable, or default-scheduler
    (no node qualified and the request allows handing it to Kubernetes' own scheduler, or GPU
    selection is disabled for the request).
    """

    def __init__(self, *, request: PlacementRequest, profile: Profile, outcome: Outcome, diagnosis: Diagnosis,
                 message: str, need: Need | None = None, node: str | None = None,
                 assignment: Assignment | None = None, matrix: ScoreMatrix | None = None,
                 rejected_examples: list[tuple[int, str, str]] | None = None, idle_gpus: int | None = None,
                 attempts: int = 0, names: list[str] | None = None) -> None:
        self.request = request
        self.profile_name = profile.name
        self.weights = profile.weights
        self.outcome = outcome
        self.diagnosis = diagnosis
        self.message = message
        self.need = need
        self.node = node
        self.assignment = assignment
        self.matrix = matrix
        self.idle_gpus = idle_gpus
        self.attempts = attempts
        # The reasons and details were worded during the cycle, from the state it saw; the rows
        # are made when first read (a decision nobody reads pays for none).
        self._rejected_examples = rejected_examples or []
        self._names = names or []

    # ---- constructors used by the framework -----------------------------------------------

    @classmethod
    def placed(cls, request: PlacementRequest, profile: Profile, need: Need, diagnosis: Diagnosis,
               matrix: ScoreMatrix, examples: list[tuple[int, str, str]], assignment: Assignment,
               attempts: int, names: list[str]) -> ScheduleResult:
        """The request was placed: ``assignment`` on its node, after ``attempts`` failed reserves."""
        if assignment.partitions:
            where = f"GPU {','.join(str(i) for i in assignment.gpu_indexes)}"
            part = assignment.partitions[0]
            unit = part.mig_profile or f"{assignment.kind} {part.share_milli / 10:g}%"
            message = f"placed on {assignment.node} {where} ({unit}); {diagnosis.message()}"
        else:
            message = f"placed on {assignment.node} (CPU only); {diagnosis.message()}"
        return cls(request=request, profile=profile, outcome=Outcome.PLACED, diagnosis=diagnosis, message=message,
                   need=need, node=assignment.node, assignment=assignment, matrix=matrix,
                   rejected_examples=examples, attempts=attempts, names=names)

    @classmethod
    def not_placed(cls, request: PlacementRequest, profile: Profile, need: Need, diagnosis: Diagnosis,
                   examples: list[tuple[int, str, str]], outcome: Outcome, *, idle_gpus: int,
                   pre_filter: Status | None, names: list[str]) -> ScheduleResult:
        """No node qualified: unschedulable, or handed to the default scheduler (``outcome``)."""
        message = diagnosis.message()
        if pre_filter is not None and pre_filter.detail:
            message += f" ({pre_filter.detail})"
        if outcome == Outcome.DEFAULT_SCHEDULER:
            message += (
                f"; handed over to the default Kubernetes scheduler (no node affinity); "
                f"{idle_gpus} idle GPUs on schedulable nodes"
            )
        return cls(request=request, profile=profile, outcome=outcome, diagnosis=diagnosis, message=message,
                   need=need, rejected_examples=examples, idle_gpus=idle_gpus, names=names)

    @classmethod
    def without_selection(cls, request: PlacementRequest, profile: Profile, diagnosis: Diagnosis) -> ScheduleResult:
        """The request disabled GPU selection: the default scheduler places it."""
        message = "GPU selection is disabled for this request: handed over to the default Kubernetes scheduler"
        return cls(request=request, profile=profile, outcome=Outcome.DEFAULT_SCHEDULER, diagnosis=diagnosis,
                   message=message)

    # ---- reading ---------------------------------------------------------------------------

    @property
    def classification(self) -> Classification | None:
        return self.need.classification if self.need else None

    @property
    def sizing_rule(self) -> str:
        """Which rule sized the placement ("MIG: smallest free instance with at least 8 GB ->
        1g.10gb"); unplaced, the rule of each kind the request accepts; "" without a need."""
        need = self.need
        if need is None:
            return ""
        if self.assignment is not None:
            return sizing_rule(need.sizing, self.assignment, need.memory_per_gpu_mib, need.gpu_count)
        # A multi-GPU replica is only ever given whole GPUs.
        kinds = [kind for kind in KINDS if kind in need.kinds and (kind == PartitionKind.EXCLUSIVE or not need.multi_gpu)]
        return "; ".join(kind_rule(need.sizing, kind, need.memory_per_gpu_mib, need.gpu_count) for kind in kinds)

    @cached_property
    def rejected_rows(self) -> list[NodeVerdict]:
        """Example rows of rejected nodes (a few per reason), in node order."""
        names = self._names
        return [NodeVerdict(node=names[i], feasible=False, reason=reason, detail=detail)
                for i, reason, detail in self._rejected_examples]

    @cached_property
    def scored_rows(self) -> list[NodeVerdict]:
        """Feasible nodes kept (best first), with their per-plugin breakdown."""
        return self.matrix.rows() if self.matrix is not None else []

    def _scored_dicts(self) -> list[dict[str, object]]:
        if "scored_rows" in self.__dict__:  # already materialized: the same rows
            return [row.to_dict() for row in self.scored_rows]
        return self.matrix.row_dicts() if self.matrix is not None else []

    @property
    def rows(self) -> list[NodeVerdict]:
        """Every row kept: scored nodes best first, then rejected examples in node order."""
        return self.scored_rows + self.rejected_rows

    def row(self, node: str) -> NodeVerdict | None:
        """The kept row of ``node``, if any."""
        return next((row for row in self.rows if row.node == node), None)

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form (what the Decision model stores and the API returns)."""
        request = self.request
        need = self.need
        return {
            "request": {
                "key": request.key,
                "memory_mib": request.memory_mib,
                "gpu_count": request.gpu_count,
                "priority": str(request.priority),
                "latency_slo_ms": request.latency_slo_ms,
                "workload_type": str(request.workload_type),
                "namespace": request.namespace,
                "sharing": str(request.sharing),
                "share_milli": request.share_milli,
                "cpu_milli": request.cpu_milli,
                "host_memory_mib": request.host_memory_mib,
            },
            "classification": self.classification.to_dict() if self.classification else None,
            "need": None if need is None else {
                "share_milli": need.share_milli,
                "memory_mib": need.memory_mib,
                "memory_per_gpu_mib": need.memory_per_gpu_mib,
                # The same in the request's units (GB in, GB out; shares in percent).
                "share_percent": round(need.share_milli / 10, 1),
                "memory_gb": round(need.memory_mib / MIB_PER_GB, 2),
                "memory_per_gpu_gb": round(need.memory_per_gpu_mib / MIB_PER_GB, 2),
                "gpu_count": need.gpu_count,
                "kinds": sorted(str(kind) for kind in need.kinds),
                "sizing": need.sizing.to_dict(),
            },
            "sizing": self.sizing_rule,
            "profile": self.profile_name,
            "weights": dict(self.weights),
            # What a row's total means: the weighted mean of its normalized scores, 0..100.
            "total_scale": TOTAL_SCALE,
            "outcome": str(self.outcome),
            "node": self.node,
            "assignment": self.assignment.to_dict() if self.assignment else None,
            "message": self.message,
            "diagnosis": self.diagnosis.to_dict(),
            "feasible_nodes": self.matrix.feasible if self.matrix is not None else 0,
            "idle_gpus": self.idle_gpus,
            "rows": self._scored_dicts() + [row.to_dict() for row in self.rejected_rows],
        }
