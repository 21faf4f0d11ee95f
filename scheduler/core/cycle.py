"""One scheduling cycle: pre-filter, filter, score, choose, assign and reserve (the ``Scheduler``).

The cycle calls the extension points of ``scheduler.core.framework`` in profile order and keeps
what it needs to explain itself: each rejected node counts under the reason of the first filter
that refused it (with a few examples per reason), each feasible node gets raw, normalized and
weighted scores (``ScoreMatrix``). When no node qualifies, the fallback rule (seed 004) says
whether the request goes to Kubernetes' default scheduler.
"""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import SHARE_MILLI_FULL
from scheduler.core.assignment import assign
from scheduler.core.decision import Outcome, ScheduleResult, ScoreMatrix
from scheduler.core.diagnosis import Diagnosis
from scheduler.core.fit import build_need
from scheduler.core.framework import (
    MAX_SCORE,
    SUCCESS,
    CycleState,
    FilterPlugin,
    Profile,
    ReservePlugin,
    ScoreRangeError,
    Status,
)
from scheduler.core.limits import HardwareLimits
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import Assignment, PlacementRequest

WEIGHT_SCALE = 1000  # weights are kept as integer thousandths so totals are exact integers
_CODES_PER_FILTER = 64  # reason codes of one filter are 1..63
_EXAMPLE_WINDOW = 512  # rejected nodes searched for examples before a full scan
_HARDWARE = HardwareLimits()


class Scheduler:
    """Runs scheduling cycles with one profile."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._weights_column = np.array(
            [int(round(weight * WEIGHT_SCALE)) for _plugin, weight in profile.scores], dtype=np.int64
        )
        self._weights = tuple(weight for _plugin, weight in profile.scores)
        self._plugin_names = tuple(plugin.NAME for plugin, _weight in profile.scores)

    def schedule(self, request: PlacementRequest, snapshot: ClusterSnapshot, *, reserve: bool = True,
                 hardware_first: bool = False) -> ScheduleResult:
        """One cycle: classify, pre-filter, filter, score, choose, assign and (by default) reserve.

        With ``reserve=True`` the assignment is applied to ``snapshot`` through the Reserve
        plugins, so the next cycle sees it. A rejected node that its hardware rules out counts
        under that reason (``scheduler.core.limits``) when nothing fits, or always with
        ``hardware_first`` (explanations). Raises ``ScoreRangeError`` if a score plugin is buggy.
        """
        profile = self.profile
        total_nodes = len(snapshot)
        if not request.enable_gpu_selection:
            diagnosis = Diagnosis(total_nodes, total_nodes, {})
            return ScheduleResult.without_selection(request, profile, diagnosis)
        need = build_need(request, profile.classification)
        state = CycleState(request, need, snapshot)

        for pre_filter in profile.pre_filters:
            status = pre_filter.pre_filter(state)
            if not status.ok:
                reason = status.reason or f"rejected by {pre_filter.NAME}"
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
        filters = profile.filters
        if len(nodes) == 0 or hardware_first:
            # A node its hardware rules out counts under that reason, whichever filter came first
            # (a GPU too small for the request is the answer, not the node's sharing mode).
            filters = (*filters, _HARDWARE)
            ruled = np.flatnonzero(rejected_by >= 0)
            codes = _HARDWARE.filter(state, ruled)
            limited = codes != 0
            rejected_by[ruled[limited]] = len(filters) - 1
            rejected_code[ruled[limited]] = codes[limited]
        counts, examples = self._rejections(state, filters, rejected_by, rejected_code, total_nodes)
        diagnosis = Diagnosis(total_nodes, len(nodes), counts)
        if len(nodes) == 0:
            return self._no_fit(state, diagnosis, examples, None)

        for pre_score in profile.pre_scores:
            pre_score.pre_score(state, nodes)
        matrix = self._score(state, nodes)
        for attempt, node_id in enumerate(matrix.order_ids()):
            assignment = assign(
                snapshot.nodes[node_id],
                need,
                request.key,
                snapshot.models.mig_profiles[snapshot.model_id[node_id]],
                cpu_milli=request.cpu_milli,
                host_memory_mib=request.host_memory_mib,
                gpu_hint=state.gpu_hint(node_id),
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

    def _rejections(self, state: CycleState, filters: tuple[FilterPlugin, ...], rejected_by: np.ndarray,
                    rejected_code: np.ndarray, total_nodes: int) -> tuple[dict[str, int], list[tuple[int, str, str]]]:
        """Count rejected nodes per reason (``rejected_by``: position in ``filters``) and explain a
        bounded number of them."""
        ids = np.flatnonzero(rejected_by >= 0)
        if not len(ids):
            return {}, []
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
        # (Read as unsigned, a negative score is huge: one comparison tests both ends.)
        if len(nodes) and (norms.view(np.uint64) > MAX_SCORE).any():
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
