"""Consolidation planner: moves that empty whole nodes, then whole GPUs (docs/design.md section 6).

Pure Python + numpy, no Django. Given the nodes (each GPU's free milli, MPS/time-slice client
room, free MIG partitions; CPU and host memory left; cordoned) and the workloads on them, it

1. tries to evacuate the least-loaded nodes first: each workload (highest priority first, then
   the largest) is re-placed with the packing policy (BestFit by default) onto a node in use
   (moving onto an idle one frees nothing) that is neither being emptied nor already emptied;
   a node counts as freed only if *all* its workloads fit elsewhere (else nothing of it moves);
2. then, on the nodes that stay, tries to empty partly used GPUs the same way, onto GPUs that
   are already in use (moving onto an idle GPU would free nothing).

Constraints every move respects: GPU room (milli per GPU, whole GPUs for whole-GPU requests),
the target node's sharing mode equal to the workload's, MPS/time-slice client limits, a free
MIG partition of the same profile, the GPU models the workload accepts, CPU and host memory,
cordoned nodes (never a source nor a target), do-not-disrupt (a node or GPU holding one is
left alone), each workload group's PDB budget (moves per group <= budget), and namespace quotas.
A node (or GPU) that received a workload is not emptied later, so every workload moves at most once.

Quotas: a move can change what a namespace is charged (a quarter-GPU replica takes a 500-milli
slot on an MPS R=2 node, a 250 one on R=4: ``PlanNode.slot_milli``), and the executor places
every replacement before it releases any original, so for a while the namespace holds both.
A move is therefore only made where the namespace's use now plus the charge of every
replacement the plan places for it stays within its quota (compute milli and GPU memory),
exactly what ``check_quota`` will ask of each replacement.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from scheduler.core.consolidation_types import (
    UNLIMITED,
    WHOLE_GPU_MILLI,
    ConsolidationResult,
    Move,
    PlanGPU,
    PlanNode,
    PlanQuota,
    PlanWorkload,
    Skipped,
    quota_charge,
)

__all__ = ["UNLIMITED", "WHOLE_GPU_MILLI", "ConsolidationResult", "Move", "PlanGPU", "PlanNode", "PlanQuota",
           "PlanWorkload", "Skipped", "plan_consolidation", "quota_charge"]
POLICIES = ("bestfit", "firstfit", "worstfit")
# BestFit's normalisers (packing.py): 128 cores, 8 GPUs.
_CPU_NORM, _GPU_NORM = 128_000, 8 * WHOLE_GPU_MILLI


class _State:
    """Free resources as arrays, with an undo log so that a node's evacuation is all or nothing."""

    def __init__(self, nodes: Sequence[PlanNode], quotas: Mapping[str, PlanQuota] | None = None) -> None:
        width = max((len(n.gpus) for n in nodes), default=1) or 1
        count = len(nodes)
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.gpu_ids = [[g.index for g in n.gpus] for n in nodes]
        self.gpu_col = [{g.index: c for c, g in enumerate(n.gpus)} for n in nodes]
        self.exists = np.zeros((count, width), dtype=np.bool_)
        self.free = np.zeros((count, width), dtype=np.int64)
        self.clients = np.zeros((count, width), dtype=np.int64)
        self.mig: list[list[dict[str, int]]] = []
        for i, n in enumerate(nodes):
            self.mig.append([dict(g.free_mig) for g in n.gpus])
            for c, g in enumerate(n.gpus):
                self.exists[i, c] = True
                self.free[i, c] = g.free_milli
                self.clients[i, c] = UNLIMITED if g.clients_left is None else g.clients_left
        self.cpu = np.array([n.cpu_left_milli for n in nodes], dtype=np.int64)
        self.mem = np.array([n.memory_left_mib for n in nodes], dtype=np.int64)
        self.mode = np.array([n.sharing_mode for n in nodes], dtype=object)
        self.model = np.array([n.gpu_model for n in nodes], dtype=object)
        self.target = np.array([not n.cordoned for n in nodes], dtype=np.bool_)
        self.busy_gpu = self.free < WHOLE_GPU_MILLI  # in use: worth moving onto in the GPU pass
        self.slot = np.array([-1 if n.slot_milli is None else n.slot_milli for n in nodes], dtype=np.int64)
        # Per namespace with a quota: [compute milli, GPU memory] it may still be charged.
        self.quota_left: dict[str, list[int]] = {
            ns: [UNLIMITED if q.gpu_milli_limit is None else q.gpu_milli_limit - q.gpu_milli_used,
                 UNLIMITED if q.memory_mib_limit is None else q.memory_mib_limit - q.memory_mib_used]
            for ns, q in (quotas or {}).items()}
        self._log: list[tuple[str, int, int, Any]] = []

    def checkpoint(self) -> int:
        return len(self._log)

    def rollback(self, mark: int) -> None:
        while len(self._log) > mark:
            kind, row, col, value = self._log.pop()
            if kind == "free":
                self.free[row, col] = value
            elif kind == "clients":
                self.clients[row, col] = value
            elif kind == "cpu":
                self.cpu[row] = value
            elif kind == "mem":
                self.mem[row] = value
            elif kind == "quota":
                self.quota_left[value[0]] = value[1]
            else:
                self.mig[row][col][value[0]] = value[1]

    def charges(self, rows: np.ndarray, w: PlanWorkload) -> np.ndarray:
        """``quota_charge`` of ``w`` on each of ``rows``."""
        if w.share_milli < WHOLE_GPU_MILLI and not w.mig_profile:
            return np.where(self.slot[rows] >= 0, self.slot[rows], w.share_milli) * len(w.gpus)
        return np.full(len(rows), w.used_milli, dtype=np.int64)

    def take(self, row: int, cols: Sequence[int], w: PlanWorkload) -> None:
        self._log += [("cpu", row, 0, int(self.cpu[row])), ("mem", row, 0, int(self.mem[row]))]
        room = self.quota_left.get(w.namespace)
        if room is not None:  # the replacement is held alongside the original until it is ready
            self._log.append(("quota", row, 0, (w.namespace, list(room))))
            charge = int(self.charges(np.array([row]), w)[0])
            self.quota_left[w.namespace] = [room[0] - charge, room[1] - w.quota_memory_mib]
        self.cpu[row] -= w.cpu_milli
        self.mem[row] -= w.memory_mib
        for col in cols:
            if w.mig_profile:
                left = self.mig[row][col].get(w.mig_profile, 0)
                self._log.append(("mig", row, col, (w.mig_profile, left)))
                self.mig[row][col][w.mig_profile] = left - 1
                continue
            self._log += [("free", row, col, int(self.free[row, col])), ("clients", row, col, int(self.clients[row, col]))]
            self.free[row, col] -= w.share_milli
            if w.share_milli < WHOLE_GPU_MILLI:
                self.clients[row, col] -= 1


Candidates = tuple[np.ndarray, np.ndarray]  # rows (R,), the GPU columns each would take (R, k)


def _candidates(state: _State, w: PlanWorkload, allowed: np.ndarray, gpu_ok: np.ndarray | None = None) -> Candidates:
    """Every allowed node where ``w`` fits (in row order) and the GPUs it would take there;
    ``gpu_ok`` (nodes x GPUs) limits which GPUs may be taken."""
    ok = allowed & (state.cpu >= w.cpu_milli) & (state.mem >= w.memory_mib)
    quota = state.quota_left.get(w.namespace)
    if quota is not None:
        ok &= state.charges(np.arange(len(ok)), w) <= quota[0]
        if quota[1] < w.quota_memory_mib:
            ok[:] = False
    width = len(w.gpus)
    if not width:
        rows = np.flatnonzero(ok)
        return rows, np.zeros((len(rows), 0), dtype=np.int64)
    ok &= state.mode == w.sharing
    if w.gpu_models:
        ok &= np.isin(state.model, w.gpu_models)
    rows = np.flatnonzero(ok)
    if w.mig_profile:
        found_rows, found_cols = [], []
        for r in rows:
            cols = [c for c, free in enumerate(state.mig[r]) if free.get(w.mig_profile, 0) > 0
                    and (gpu_ok is None or gpu_ok[r, c])]
            if len(cols) >= width:
                found_rows.append(int(r))
                found_cols.append(cols[:width])
        return np.array(found_rows, dtype=np.int64), np.array(found_cols, dtype=np.int64).reshape(len(found_rows), width)
    room = state.exists[rows] & (state.free[rows] >= w.share_milli)
    if gpu_ok is not None:
        room &= gpu_ok[rows]
    if w.share_milli < WHOLE_GPU_MILLI:
        room &= state.clients[rows] > 0
        # A share: the GPU with the least free room that still holds it.
        keep = room.any(axis=1)
        masked = np.where(room, state.free[rows], np.iinfo(np.int64).max)
        return rows[keep], masked.argmin(axis=1)[keep][:, None]
    # Whole GPUs: the lowest-index free ones.
    keep = room.sum(axis=1) >= width
    order = np.argsort(~room[keep], axis=1, kind="stable")
    return rows[keep], order[:, :width]


def _pick(state: _State, w: PlanWorkload, found: Candidates, policy: str) -> tuple[int, list[int]] | None:
    rows, cols = found
    if not len(rows):
        return None
    best = 0
    if policy != "firstfit":
        gpu_left = (state.free[rows] * state.exists[rows]).sum(axis=1) - w.used_milli
        term = 0.5 * (state.cpu[rows] - w.cpu_milli) / _CPU_NORM + 0.5 * gpu_left / _GPU_NORM
        score = (100 * (1 - term) if policy == "bestfit" else 100 * term).astype(np.int64)
        best = int(np.argmax(score))
    return int(rows[best]), [int(c) for c in cols[best]]


def _order(workloads: Sequence[PlanWorkload]) -> list[PlanWorkload]:
    """Highest priority first (it gets the best slots), then the largest (harder to fit)."""
    return sorted(workloads, key=lambda w: (-w.priority, -w.used_milli, -w.cpu_milli, w.key))


class _Planner:
    def __init__(self, nodes: Sequence[PlanNode], workloads: Sequence[PlanWorkload],
                 budgets: Mapping[str, int], policy: str, quotas: Mapping[str, PlanQuota] | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown packing policy {policy!r}; one of {', '.join(POLICIES)}")
        self.nodes, self.policy, self.budgets = list(nodes), policy, budgets
        self.state = _State(nodes, quotas)
        self.by_node: dict[str, list[PlanWorkload]] = {n.name: [] for n in nodes}
        for w in workloads:
            self.by_node.setdefault(w.node, []).append(w)
        self.used: dict[str, int] = {}
        self.moves: list[Move] = []
        self.skipped: list[Skipped] = []
        self.received = np.zeros(len(nodes), dtype=np.bool_)
        self.received_gpus: set[tuple[int, int]] = set()
        self.emptied = ~self.state.target

    def _budget_refusal(self, group: list[PlanWorkload]) -> str:
        wanted: dict[str, int] = {}
        for w in group:
            wanted[w.group] = wanted.get(w.group, 0) + 1
        for name, count in sorted(wanted.items()):
            budget = self.budgets.get(name)
            if budget is not None and self.used.get(name, 0) + count > budget:
                return f"moving {count} replica(s) of {name} would exceed its disruption budget ({budget})"
        return ""

    def _evacuate(self, workloads: list[PlanWorkload], allowed: np.ndarray, why: str,
                  onto_busy_gpus: bool = False, exclude: tuple[int, int] | None = None) -> list[Move] | None:
        """Re-place every workload or none (state rolled back); the moves when all fit."""
        mark = self.state.checkpoint()
        moves = []
        for w in _order(workloads):
            gpu_ok = None
            if onto_busy_gpus or exclude is not None:
                gpu_ok = self.state.busy_gpu.copy() if onto_busy_gpus else np.ones_like(self.state.busy_gpu)
                if exclude is not None:
                    gpu_ok[exclude] = False
            choice = _pick(self.state, w, _candidates(self.state, w, allowed, gpu_ok), self.policy)
            if choice is None:
                self.state.rollback(mark)
                return None
            row, cols = choice
            self.state.take(row, cols, w)
            ids = tuple(self.state.gpu_ids[row][c] for c in cols)
            moves.append(Move(w.key, w.group, w.node, w.gpus, self.nodes[row].name, ids, w.mig_profile, why))
        return moves

    def _commit(self, moves: list[Move]) -> None:
        for move in moves:
            self.used[move.group] = self.used.get(move.group, 0) + 1
            row = self.state.index[move.to_node]
            self.received[row] = True
            for gpu in move.to_gpus:
                col = self.state.gpu_col[row][gpu]
                self.state.busy_gpu[row, col] = True
                self.received_gpus.add((row, col))
        self.moves += moves

    def free_nodes(self) -> list[str]:
        st = self.state
        load = [(sum(w.used_milli for w in self.by_node[n.name]), len(self.by_node[n.name]), i)
                for i, n in enumerate(self.nodes)]
        freed: list[str] = []
        emptied = ~st.target.copy()  # cordoned nodes never take anything
        # Moving onto an idle node frees nothing: only nodes in use take workloads.
        emptied |= np.array([not self.by_node[n.name] for n in self.nodes], dtype=np.bool_)
        for _, count, row in sorted(load):
            node = self.nodes[row]
            if count == 0 or node.cordoned or self.received[row]:
                continue
            workloads = self.by_node[node.name]
            blockers = sorted(w.key for w in workloads if w.do_not_disrupt)
            if blockers:
                self.skipped.append(Skipped(node.name, None, f"holds do-not-disrupt {', '.join(blockers)}"))
                continue
            refusal = self._budget_refusal(workloads)
            if refusal:
                self.skipped.append(Skipped(node.name, None, refusal))
                continue
            allowed = ~emptied
            allowed[row] = False
            moves = self._evacuate(workloads, allowed, f"empties node {node.name}")
            if moves is None:
                self.skipped.append(Skipped(node.name, None, "its workloads do not all fit elsewhere"))
                continue
            emptied[row] = True
            self._commit(moves)
            freed.append(node.name)
        self.emptied = emptied
        return freed

    def free_gpus(self) -> list[tuple[str, int]]:
        """On nodes that stay, empty partly used GPUs onto other GPUs already in use."""
        st = self.state
        freed: list[tuple[str, int]] = []
        allowed = ~self.emptied
        gpus = []
        for row, node in enumerate(self.nodes):
            if self.emptied[row] or node.cordoned:
                continue
            for gpu in node.gpus:
                on = [w for w in self.by_node[node.name] if gpu.index in w.gpus]
                if on and all(len(w.gpus) == 1 and w.share_milli < WHOLE_GPU_MILLI and not w.mig_profile for w in on):
                    gpus.append((sum(w.share_milli for w in on), row, gpu.index, on))
        for _, row, index, on in sorted(gpus, key=lambda g: g[:3]):
            col = st.gpu_col[row][index]
            name = self.nodes[row].name
            if (row, col) in self.received_gpus:
                continue  # it received a workload: leave it
            if any(w.do_not_disrupt for w in on) or self._budget_refusal(on):
                continue
            moves = self._evacuate(on, allowed, f"empties GPU {index} of {name}", onto_busy_gpus=True,
                                   exclude=(row, col))
            if moves is None:
                continue
            st.busy_gpu[row, col] = False
            st.free[row, col] += sum(w.share_milli for w in on)  # the GPU is idle now
            st.clients[row, col] += sum(1 for w in on if w.share_milli < WHOLE_GPU_MILLI)
            self._commit(moves)
            freed.append((name, index))
        return freed


def plan_consolidation(nodes: Sequence[PlanNode], workloads: Sequence[PlanWorkload], *,
                       budgets: Mapping[str, int] | None = None, policy: str = "bestfit",
                       free_gpus: bool = True, quotas: Mapping[str, PlanQuota] | None = None) -> ConsolidationResult:
    """Moves that free whole nodes, then whole GPUs (see the module docstring). ``budgets``:
    group -> how many of its replicas may be moved (its PDB's disruptions allowed); a group
    not named has no limit. ``quotas``: namespace -> its quota and use (a namespace not named
    has none)."""
    planner = _Planner(nodes, workloads, budgets or {}, policy, quotas)
    freed_nodes = planner.free_nodes()
    gpus = [(name, g.index) for name in freed_nodes for g in nodes[planner.state.index[name]].gpus]
    if free_gpus:
        gpus += planner.free_gpus()
    method = (f"greedy evacuation, least-loaded node first; each workload re-placed by {policy}"
              f"{'; then partly used GPUs emptied onto GPUs in use' if free_gpus else ''}")
    return ConsolidationResult(tuple(planner.moves), tuple(freed_nodes), tuple(gpus), dict(planner.used),
                               tuple(planner.skipped), method)
