"""The scheduling framework's contract: extension points, statuses, the cycle state, profiles.

Modelled on kube-scheduler's scheduling framework. A plugin is a small class with a ``NAME``
that implements only the extension points it needs:

- ``PreFilterPlugin.pre_filter(state)``: per-request values, computed once; may reject the
  request outright (every node then counts under its reason).
- ``FilterPlugin.filter(state, nodes)``: for an array of node ids, an int array of reason codes
  (0 = passes, k = ``reasons[k - 1]``). Filters run in profile order on the nodes still in the
  running, so each node is rejected by (and counted under) the first filter that refuses it.
- ``PreScorePlugin.pre_score(state, nodes)``: once per cycle, on the feasible nodes, before
  any score: per-cycle values scores share (kube-scheduler's PreScore), e.g. which GPU of each
  node a sharing request should take (``CycleState.prefer_gpus``).
- ``ScorePlugin.score(state, nodes)``: raw integer scores; ``normalize(state, raw)`` maps them
  to 0..100 (identity by default). The framework, never the plugin, checks the range,
  multiplies by the profile's weight and keeps raw, normalized and weighted values.
- ``ReservePlugin.reserve(state, assignment)`` / ``unreserve``: claim capacity for the chosen
  node; a failing reserve unreserves those before it, in reverse order.

Everything is array-based: per-node explanations are built only for the rows a decision keeps
(the best-scored K and a few examples per rejection reason). ``scheduler.core.cycle`` runs the
cycle that calls these extension points.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np

from scheduler.core.classify import DEFAULT_CLASSIFICATION, ClassificationSettings
from scheduler.core.fit import FitTable, Need, chosen_gpus, evaluate_fit
from scheduler.core.snapshot import ClusterSnapshot
from scheduler.core.types import Assignment, PlacementRequest

MAX_SCORE = 100  # normalized scores lie in 0..MAX_SCORE


class Code(StrEnum):
    """What a PreFilter or Reserve call came to (kube-scheduler's status codes)."""

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
        """True when the call succeeded."""
        return self.code == Code.SUCCESS


SUCCESS = Status()


class ScoreRangeError(ValueError):
    """A plugin's normalized score left 0..100: a plugin bug, never silently clamped."""


class CycleState:
    """Per-cycle data shared by plugins: request, need, snapshot, and plugin-computed values.

    ``data`` holds what PreFilter computed, keyed by plugin NAME. ``fit(nodes)`` is the shared,
    cached answer to "does the request fit on these nodes, and which unit would it get";
    ``gpus(nodes)`` which GPU each would give a single-GPU request (the assignment's rule, or
    among the GPUs a PreScore plugin preferred with ``prefer_gpus``, the one that rule picks;
    -1 for a whole GPU, any of which is the same to a score).
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
        self._preferred: tuple[np.ndarray, np.ndarray] | None = None
        self._gpus: tuple[np.ndarray, np.ndarray] | None = None

    def prefer_gpus(self, nodes: np.ndarray, preferred: np.ndarray) -> None:
        """Prefer, on each of ``nodes``, the GPU columns marked in ``preferred`` (bool, one row per
        node); a node where none of them fits keeps the assignment's own choice."""
        self._preferred = (nodes, preferred)
        self._gpus = None

    def gpu_hint(self, node: int) -> int | None:
        """The GPU column a PreScore plugin's preference gives ``node`` (None: no preference)."""
        if self._preferred is None:
            return None
        marked = self._preferred[0]
        at = np.flatnonzero(marked == node)
        if not len(at):
            return None
        column = int(self.gpus(marked)[at[0]])
        return column if column >= 0 else None

    def gpus(self, nodes: np.ndarray) -> np.ndarray:
        """The GPU column each node would give a single-GPU placement (-1: none / multi-GPU)."""
        if self._gpus is not None and self._gpus[0] is nodes:
            return self._gpus[1]
        preferred = None
        if self._preferred is not None:
            marked, mask = self._preferred
            if marked is nodes:
                preferred = mask
            else:
                rows = np.full(len(self.snapshot), -1, dtype=np.int64)
                rows[marked] = np.arange(len(marked))
                at = rows.take(nodes)
                preferred = np.where((at >= 0)[:, None], mask.take(np.maximum(at, 0), axis=0), False)
        chosen = chosen_gpus(self.snapshot, self.need, self.fit(nodes), preferred, whole=False)
        self._gpus = (nodes, chosen)
        return chosen

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
    """Runs once per cycle, before any filter."""

    def pre_filter(self, state: CycleState) -> Status:
        """Compute per-request values into ``state.data[self.NAME]``; reject the request if hopeless."""
        raise NotImplementedError


class FilterPlugin(Plugin):
    """Says which nodes cannot take the request, each with a reason code."""

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


class PreScorePlugin(Plugin):
    """Runs once per cycle on the feasible nodes, before any Score plugin."""

    def pre_score(self, state: CycleState, nodes: np.ndarray) -> None:
        """Compute what this cycle's scores share (``state.data``, ``state.prefer_gpus``)."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    """Ranks the feasible nodes; the framework weighs and sums the normalized scores."""

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        """Raw integer score per feasible node id in ``nodes``."""
        raise NotImplementedError

    def normalize(self, state: CycleState, raw: np.ndarray) -> np.ndarray:
        """Map raw scores of all feasible nodes to integers 0..100; identity by default."""
        return raw


class ReservePlugin(Plugin):
    """Claims capacity on the chosen node before the cycle reports it placed."""

    def reserve(self, state: CycleState, assignment: Assignment) -> Status:
        """Claim what ``assignment`` needs; a non-ok status makes the cycle try the next node."""
        raise NotImplementedError

    def unreserve(self, state: CycleState, assignment: Assignment) -> None:
        """Give back what ``reserve`` claimed (a later Reserve plugin failed)."""
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
    pre_scores: tuple[PreScorePlugin, ...] = ()
    top_k: int = 50
    rejected_examples_per_reason: int = 3
    fallback: FallbackSettings = field(default_factory=FallbackSettings)
    classification: ClassificationSettings = DEFAULT_CLASSIFICATION

    @property
    def weights(self) -> dict[str, float]:
        """Score plugin NAME -> weight, in profile order."""
        return {plugin.NAME: weight for plugin, weight in self.scores}
