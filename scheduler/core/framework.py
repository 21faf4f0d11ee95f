"""The scheduling framework: extension points, the cycle state, and one scheduling cycle.

Modelled on kube-scheduler's scheduling framework. A plugin is a small class with a ``NAME``
that implements only the extension points it needs:

- ``PreFilterPlugin.pre_filter(state)``: per-request values, computed once; may reject the
  request outright (every node then counts under its reason).
- ``FilterPlugin.filter(state, nodes)``: for an array of node ids, an int array of reason codes
  (0 = passes, k = ``reasons[k - 1]``). Filters run in profile order on the nodes still in the
  running, so each node is rejected by (and counted under) the first filter that refuses it.
- ``ScorePlugin.score(state, nodes)``: raw integer scores; ``normalize(state, raw)`` maps them
  to 0..100 (identity by default). The framework, never the plugin, checks the range,
  multiplies by the profile's weight and keeps raw, normalized and weighted values.
- ``ReservePlugin.reserve(state, assignment)`` / ``unreserve``: claim capacity for the chosen
  node; a failing reserve unreserves those before it, in reverse order.

Everything is array-based: per-node explanations are built only for the rows a decision keeps
(the best-scored K and a few examples per rejection reason).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.assignment import assign
from scheduler.core.classify import DEFAULT_CLASSIFICATION, ClassificationSettings, classify
from scheduler.core.decision import Outcome, ScheduleResult, ScoreMatrix
from scheduler.core.diagnosis import Diagnosis
from scheduler.core.fit import FitTable, Need, evaluate_fit
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import REQUEST_KINDS, Assignment, PlacementRequest, SharingRequest

MAX_SCORE = 100
WEIGHT_SCALE = 1000  # weights are kept as integer thousandths so totals are exact integers
_CODES_PER_FILTER = 64  # reason codes of one filter are 1..63
_EXAMPLE_WINDOW = 512  # rejected nodes searched for examples before a full scan


class Code(StrEnum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    ERROR = "error"


@dataclass(frozen=True)
class Status:
    """Outcome of a PreFilter or Reserve call; ``reason`` is a fixed, countable phrase."""

    code: Code = Code.SUCCESS
    reason: str = ""
    detail: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Code.SUCCESS


SUCCESS = Status()


class ScoreRangeError(ValueError):
    """A plugin's normalized score left 0..100: a plugin bug, never silently clamped."""


class CycleState:
    """Per-cycle data shared by plugins: request, need, snapshot, and plugin-computed values.

    ``data`` holds what PreFilter computed, keyed by plugin NAME. ``fit(nodes)`` is the shared,
    cached answer to "does the request fit on these nodes, and which unit would it get".
    """

    def __init__(self, request: PlacementRequest, need: Need, snapshot: ClusterSnapshot) -> None:
        self.request = request
        self.need = need
        self.snapshot = snapshot
        self.data: dict[str, Any] = {}
        self._fit: FitTable | None = None
        self._fit_pos: np.ndarray | None = None
        self._last_nodes: np.ndarray | None = None
        self._last_table: FitTable | None = None

    def fit(self, nodes: np.ndarray) -> FitTable:
        """``evaluate_fit`` for ``nodes``, reusing the last evaluation when it covered them."""
        if nodes is self._last_nodes and self._last_table is not None:
            return self._last_table
        table = self._lookup_fit(nodes)
        self._last_nodes, self._last_table = nodes, table
        return table

    def _lookup_fit(self, nodes: np.ndarray) -> FitTable:
        if self._fit is not None and self._fit_pos is not None:
            pos = self._fit_pos.take(nodes)
            if len(pos) == 0 or pos.min() >= 0:
                return self._fit.take(pos)
        table = evaluate_fit(self.snapshot, self.need, nodes)
        # Keep the widest evaluation: a one-node explanation must not evict the filter's table.
        if self._fit is None or len(nodes) >= len(self._fit.nodes):
            self._fit = table
            self._fit_pos = np.full(len(self.snapshot), -1, dtype=np.int64)
            self._fit_pos[nodes] = np.arange(len(nodes))
        return table


class Plugin:
    """Base of every plugin; ``args`` come from the profile's ``plugin_args`` for this NAME."""

    NAME: ClassVar[str] = ""

    def __init__(self, **args: Any) -> None:
        if args:
            raise TypeError(f"{self.NAME} takes no arguments, got {sorted(args)}")

    def __repr__(self) -> str:
        return f"<{self.NAME}>"


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState) -> Status:
        """Compute per-request values into ``state.data[self.NAME]``; reject the request if hopeless."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    REASONS: ClassVar[tuple[str, ...]] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        """Fixed reason phrases; code k means ``reasons[k - 1]``. Override when they depend on args."""
        return self.REASONS

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        """Reason code per node id in ``nodes`` (0 = the node passes)."""
        raise NotImplementedError

    def explain(self, state: CycleState, node: int, code: int) -> str:
        """One node's rejection in words (only called for rows a decision keeps)."""
        return self.reasons[code - 1]


class ScorePlugin(Plugin):
    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        """Raw integer score per feasible node id in ``nodes``."""
        raise NotImplementedError

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        """Map raw scores of all feasible nodes to integers 0..100; identity by default."""
        return raw


class ReservePlugin(Plugin):
    def reserve(self, state: CycleState, assignment: Assignment) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, assignment: Assignment) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class FallbackSettings:
    """Seed 004: a GPU is idle below both thresholds; a GPU without metrics and unallocated is idle."""

    idle_utilization_pct: float = 30.0
    idle_memory_pct: float = 50.0


@dataclass(frozen=True)
class Profile:
    """Enabled plugins and weights (built from settings data by ``profiles.build_profile``)."""

    name: str
    filters: tuple[FilterPlugin, ...]
    scores: tuple[tuple[ScorePlugin, float], ...]
    reserves: tuple[ReservePlugin, ...] = ()
    pre_filters: tuple[PreFilterPlugin, ...] = ()
    top_k: int = 50
    rejected_examples_per_reason: int = 3
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    classification: ClassificationSettings = DEFAULT_CLASSIFICATION

    @property
    def weights(self) -> dict[str, float]:
        return {plugin.NAME: weight for plugin, weight in self.scores}


def build_need(request: PlacementRequest, settings: ClassificationSettings = DEFAULT_CLASSIFICATION) -> Need:
    """Classify the request and derive what one replica needs (share, memory, accepted kinds).

    An explicit ``sharing`` of ``exclusive`` means a whole GPU whatever the class; an explicit
    ``share_milli`` overrides the class's default share.
    """
    classification = classify(request.memory_mib, request.priority, request.latency_slo_ms, settings)
    sharing = SharingRequest(request.sharing)
    if sharing == SharingRequest.EXCLUSIVE:
        share = SHARE_MILLI_FULL
    elif request.share_milli is not None:
        share = request.share_milli
    else:
        share = classification.share_milli
    if not 1 <= share <= SHARE_MILLI_FULL:
        raise ValueError(f"share_milli must be within 1..{SHARE_MILLI_FULL}, got {share}")
    if request.gpu_count < 1:
        raise ValueError(f"gpu_count must be at least 1, got {request.gpu_count}")
    if request.memory_mib < 0:
        raise ValueError(f"memory_mib must not be negative, got {request.memory_mib}")
    return Need(
        memory_mib=request.memory_mib,
        gpu_count=request.gpu_count,
        # A multi-GPU (tensor-parallel) replica takes whole GPUs.
        share_milli=SHARE_MILLI_FULL if request.gpu_count > 1 else share,
        kinds=REQUEST_KINDS[sharing],
        classification=classification,
    )


class Scheduler:
    """Runs scheduling cycles with one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._weights_column = np.array(
            [int(round(weight * WEIGHT_SCALE)) for _plugin, weight in profile.scores], dtype=np.int64
        )
        self._weights = tuple(weight for _plugin, weight in profile.scores)
        self._plugin_names = tuple(plugin.NAME for plugin, _weight in profile.scores)

    def schedule(self, request: PlacementRequest, snapshot: ClusterSnapshot, *, reserve: bool = True) -> ScheduleResult:
        """One cycle: classify, pre-filter, filter, score, choose, assign and (by default) reserve.

        With ``reserve=True`` the assignment is applied to ``snapshot`` through the Reserve
        plugins, so the next cycle sees it. Raises ``ScoreRangeError`` if a score plugin is buggy.
        """
        profile = self.profile
        total_nodes = len(snapshot)
        if not request.enable_gpu_selection:
            diagnosis = Diagnosis(total_nodes, total_nodes, {})
            return ScheduleResult.without_selection(request, profile, diagnosis)
        need = build_need(request, profile.classification)
        state = CycleState(request, need, snapshot)

        for plugin in profile.pre_filters:
            status = plugin.pre_filter(state)
            if not status.ok:
                reason = status.reason or f"rejected by {plugin.NAME}"
                diagnosis = Diagnosis(total_nodes, 0, {reason: total_nodes} if total_nodes else {})
                return self._no_fit(state, diagnosis, [], status)

        nodes = np.arange(total_nodes, dtype=np.int64)
        rejected_by = np.full(total_nodes, -1, dtype=np.int64)
        rejected_code = np.zeros(total_nodes, dtype=np.int64)
        for position, plugin in enumerate(profile.filters):
            if len(nodes) == 0:
                break
            codes = np.asarray(plugin.filter(state, nodes))
            bad = codes != 0
            if bad.any():
                out = nodes.compress(bad)
                rejected_by[out] = position
                rejected_code[out] = codes.compress(bad)
                nodes = nodes.compress(~bad)
        counts, examples = self._rejections(state, rejected_by, rejected_code, total_nodes)
        diagnosis = Diagnosis(total_nodes, len(nodes), counts)
        if len(nodes) == 0:
            return self._no_fit(state, diagnosis, examples, None)

        matrix = self._score(state, nodes)
        for attempt, node_id in enumerate(matrix.order_ids()):
            assignment = assign(
                snapshot.nodes[node_id],
                need,
                request.key,
                snapshot.models.mig_profiles[snapshot.model_id[node_id]],
            )
            if assignment is None:  # pragma: no cover - fit and assignment agree (property-tested)
                continue
            if reserve:
                status = self._reserve(state, assignment)
                if not status.ok:
                    # Another writer took the capacity: try the next best node, like a retry.
                    continue
            return ScheduleResult.placed(request, profile, need, diagnosis, matrix, examples, assignment, attempt,
                                         snapshot.names)
        return self._no_fit(state, Diagnosis(total_nodes, 0, {**counts, "capacity changed during reserve": len(nodes)}),
                            examples, None)

    # ---- steps -----------------------------------------------------------------------------

    def _rejections(self, state: CycleState, rejected_by: np.ndarray, rejected_code: np.ndarray,
                    total_nodes: int) -> tuple[dict[str, int], list[tuple[int, str, str]]]:
        """Count rejected nodes per reason and explain a bounded number of them."""
        ids = np.flatnonzero(rejected_by >= 0)
        if not len(ids):
            return {}, []
        filters = self.profile.filters
        keys = rejected_by.take(ids) * _CODES_PER_FILTER + rejected_code.take(ids)
        per_key = np.bincount(keys)
        counts: dict[str, int] = {}
        examples: list[tuple[int, str, str]] = []
        keep_all = total_nodes <= self.profile.top_k
        wanted = self.profile.rejected_examples_per_reason
        # Examples come from the first rejected nodes (node order); a reason absent there gets
        # its first node from a full scan. Keeps this O(rejected) with a small constant.
        head_ids, head_keys = ids[:_EXAMPLE_WINDOW], keys[:_EXAMPLE_WINDOW]
        for key in np.flatnonzero(per_key).tolist():
            plugin = filters[key // _CODES_PER_FILTER]
            code = key % _CODES_PER_FILTER
            reason = plugin.reasons[code - 1]
            counts[reason] = counts.get(reason, 0) + int(per_key[key])
            if keep_all:
                shown = ids[keys == key].tolist()
            elif wanted:
                shown = head_ids[head_keys == key][:wanted].tolist() or [int(ids[np.argmax(keys == key)])]
            else:
                shown = []
            for node in shown:
                examples.append((node, reason, plugin.explain(state, node, code)))
        examples.sort()
        return counts, examples

    def _score(self, state: CycleState, nodes: np.ndarray) -> ScoreMatrix:
        """Raw, normalized and weighted scores of every feasible node; keeps the top K."""
        plugins = self.profile.scores
        raws = np.empty((len(plugins), len(nodes)), dtype=np.int64)
        norms = np.empty_like(raws)
        for row, (plugin, _weight) in enumerate(plugins):
            raws[row] = plugin.score(state, nodes)
            norms[row] = plugin.normalize(state, raws[row])
        # One range check for all plugins; name the culprit only when it fails.
        if len(nodes) and (norms.min() < 0 or norms.max() > MAX_SCORE):
            for row, (plugin, _weight) in enumerate(plugins):
                low, high = int(norms[row].min()), int(norms[row].max())
                if low < 0 or high > MAX_SCORE:
                    raise ScoreRangeError(
                        f"{plugin.NAME} normalized scores must be within 0..{MAX_SCORE}, got {low}..{high}"
                    )
        # Integer totals (thousandths of a point) are exact, so equal scores tie exactly.
        # (einsum: numpy's integer matmul does not use BLAS and is several times slower.)
        totals = np.einsum("p,pn->n", self._weights_column, norms) if len(plugins) else np.zeros(len(nodes), np.int64)
        return ScoreMatrix.top(
            snapshot=state.snapshot,
            nodes=nodes,
            raw=raws,
            normalized=norms,
            weights_milli=self._weights_column,
            totals=totals,
            plugin_names=self._plugin_names,
            weights=self._weights,
            k=self.profile.top_k,
            weight_scale=WEIGHT_SCALE,
        )

    def _reserve(self, state: CycleState, assignment: Assignment) -> Status:
        done: list[ReservePlugin] = []
        for plugin in self.profile.reserves:
            status = plugin.reserve(state, assignment)
            if not status.ok:
                for earlier in reversed(done):
                    earlier.unreserve(state, assignment)
                return status
            done.append(plugin)
        return SUCCESS

    def _no_fit(self, state: CycleState, diagnosis: Diagnosis, examples: list[tuple[int, str, str]],
                status: Status | None) -> ScheduleResult:
        """No node qualifies: hand over to the default scheduler if allowed, else unschedulable."""
        idle = self.idle_gpus(state.snapshot)
        outcome = Outcome.DEFAULT_SCHEDULER if state.request.allow_default_scheduler else Outcome.UNSCHEDULABLE
        return ScheduleResult.not_placed(state.request, self.profile, state.need, diagnosis, examples, outcome,
                                         idle_gpus=idle, pre_filter=status, names=state.snapshot.names)

    def idle_gpus(self, snapshot: ClusterSnapshot) -> int:
        """GPUs idle by the fallback rule on ready, schedulable nodes (seed 004).

        Idle: utilization below ``idle_utilization_pct`` and memory below ``idle_memory_pct``;
        a GPU without metrics counts as idle when nothing is allocated on it.
        """
        settings = self.profile.fallback
        util = snapshot.gpu_util_pct
        memory = snapshot.gpu_memory_used_pct
        measured = ~np.isnan(util)
        with np.errstate(invalid="ignore"):  # NaN (no sample) compares False, as intended
            quiet = (util < settings.idle_utilization_pct) & (np.nan_to_num(memory) < settings.idle_memory_pct)
        unallocated = snapshot.gpu_free_share_milli >= SHARE_MILLI_FULL
        idle = np.where(measured, quiet, unallocated) & snapshot.gpu_present
        usable = snapshot.ready & ~snapshot.cordoned
        return int(idle[usable].sum())
