"""Filter CapabilityMatch: GPU model known and accepted, node labels match, taints tolerated."""
from __future__ import annotations

import numpy as np

from nodes.vocabulary import BLOCKING_TAINT_EFFECTS, Taint
from scheduler.core.framework import SUCCESS, CycleState, FilterPlugin, PreFilterPlugin, Status
from scheduler.core.types import Toleration


def accepts_model(accepted: tuple[str, ...], model_key: str, family: str) -> bool:
    """True when ``accepted`` is empty or names the model's catalog key or family (any case)."""
    if not accepted:
        return True
    names = {name.casefold() for name in accepted}
    return model_key.casefold() in names or family.casefold() in names


def tolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates, or None when all are tolerated."""
    for taint in taints:
        if taint.effect in BLOCKING_TAINT_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


class CapabilityMatch(PreFilterPlugin, FilterPlugin):
    """Pass iff the node's GPU model is known and accepted, its labels contain the request's
    ``node_selector`` and every NoSchedule/NoExecute taint is tolerated.

    PreFilter turns the request into lookups so that Filter needs no per-node Python: a code per
    node group (model and taints are group properties; cached on the snapshot per accepted-model
    list and tolerations) and a node-selector mask from the snapshot's label index.

    Codes: 1 "unknown GPU model", 2 "GPU model not accepted", 3 "node labels do not match",
    4 "untolerated taint".
    """

    NAME = "CapabilityMatch"
    REASONS = ("unknown GPU model", "GPU model not accepted", "node labels do not match", "untolerated taint")

    def pre_filter(self, state: CycleState) -> Status:
        snapshot = state.snapshot
        request = state.request
        key = (self.NAME, tuple(request.gpu_models), tuple(request.tolerations))
        by_group = snapshot.static_cache.get(key)
        if by_group is None:
            by_group = snapshot.static_cache[key] = self._codes_by_group(state)
        selector = snapshot.label_mask(request.node_selector) if request.node_selector else None
        state.data[self.NAME] = (by_group, selector)
        return SUCCESS

    def _codes_by_group(self, state: CycleState) -> np.ndarray:
        """Codes 1, 2 and 4 per node group: model and taints are group properties."""
        snapshot = state.snapshot
        request = state.request
        models = snapshot.models
        accepted = np.array(
            [bool(key) and accepts_model(tuple(request.gpu_models), key, family)
             for key, family in zip(models.keys, models.families, strict=True)]
        )
        tolerated_sets = np.array(
            [tolerated(taints, tuple(request.tolerations)) is None for taints in snapshot.taint_sets]
        )
        group_model = snapshot.group_model_id
        by_group = np.where(~tolerated_sets[snapshot.group_taint_set_id], 4, 0)
        by_group = np.where(~accepted[group_model], 2, by_group)
        return np.where(group_model == 0, 1, by_group)

    def filter(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        by_group, selector = state.data[self.NAME]
        code = by_group.take(state.snapshot.group_id.take(nodes))
        if selector is not None:
            # Labels rank after model (1, 2) and before taints (4).
            code = np.where((code != 1) & (code != 2) & ~selector.take(nodes), 3, code)
        return code

    def explain(self, state: CycleState, node: int, code: int) -> str:
        snapshot = state.snapshot
        request = state.request
        state_node = snapshot.nodes[node]
        if code == 1:
            shown = state_node.gpu_model or "no catalog model"
            return f"GPU model {shown!r} is not in the gpuplane catalog"
        if code == 2:
            return f"{state_node.gpu_model} is not among the accepted models {', '.join(request.gpu_models)}"
        if code == 3:
            missing = [f"{k}={v}" for k, v in request.node_selector.items() if state_node.labels.get(k) != v]
            return f"missing labels {', '.join(missing)}"
        taint = tolerated(tuple(state_node.taints), tuple(request.tolerations))
        if taint is None:  # pragma: no cover - only called for nodes this filter rejected
            return self.REASONS[3]
        return f"untolerated taint {taint.key}={taint.value}:{taint.effect}"
