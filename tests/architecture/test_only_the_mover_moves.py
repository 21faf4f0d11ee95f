"""Issue 18, must-show 4: only the mover removes a pod gpuplane moves, and only it places replacements.

Read from the code (AST), not from a list kept beside it: every call in the application whose
name is one of the ways to take a pod or a replica away, or to place one, is found, and each must
sit in a module allowed to make it:

- ``evict_pod`` (the Eviction API): the mover (``scheduler.services.moving``) and the backends
  that implement it (``nodes/cluster/``);
- ``release_replica`` (scales a workload down or deletes it), ``place_replicas``: the scheduler's
  own services (the mover; placing, releasing, watching and deploying, which move nothing);
- ``delete_pod``, ``scale_workload``, ``delete_workload``: the backends and the scheduler's
  execution services; ``delete_pod`` also the demo loader (its batch pods);
- the requesters (rollouts, consolidation, savings) make none of these calls, and import neither
  ``placing`` nor ``releasing`` for them: they create moves (``request_move``) and read outcomes;
  the autoscaler's scale-down and preemption create removals (``request_removal``), and the
  autoscaler places (a scale-up is no move) but releases nothing.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPLICATION = ("nodes", "scheduler", "lifecycle", "rollouts", "consolidation", "savings", "gpuplane")
REQUESTERS = ("rollouts", "consolidation", "savings")

ALLOWED: dict[str, tuple[str, ...]] = {
    "evict_pod": ("scheduler/services/moving.py", "nodes/cluster/"),
    # The autoscaler's scale-down and preemption's victims are removals: the mover releases them.
    "release_replica": ("scheduler/services/moving.py", "scheduler/services/releasing.py",
                        "scheduler/services/placing.py", "scheduler/services/watching.py"),
    # A scale-up places new replicas, as a deploy does: not a move.
    "place_replicas": ("scheduler/services/moving.py", "scheduler/services/placing.py",
                       "scheduler/services/deploy.py", "scheduler/services/autoscaling.py"),
    "delete_pod": ("nodes/cluster/", "scheduler/demo.py"),
    "scale_workload": ("nodes/cluster/", "scheduler/services/releasing.py", "scheduler/services/execution.py"),
    "delete_workload": ("nodes/cluster/", "scheduler/services/releasing.py", "scheduler/services/execution.py"),
}


def _modules() -> list[Path]:
    return [path for package in APPLICATION for path in sorted((REPO / package).rglob("*.py"))
            if "migrations" not in path.parts]


def _called_names(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ALLOWED:
                found.append((name, node.lineno))
    return found


def test_only_allowed_modules_evict_release_or_place():
    offenders = []
    for path in _modules():
        relative = path.relative_to(REPO).as_posix()
        for name, line in _called_names(path):
            if not any(relative == allowed or (allowed.endswith("/") and relative.startswith(allowed))
                       for allowed in ALLOWED[name]):
                offenders.append(f"{relative}:{line} calls {name}")
    assert offenders == [], "only the mover evicts or places replacements:\n" + "\n".join(offenders)


def test_the_requesters_reach_replicas_only_through_moves():
    offenders = []
    for package in REQUESTERS:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module in ("scheduler.services.placing",
                                                                        "scheduler.services.releasing"):
                    taken = {alias.name for alias in node.names} & {"release_replica", "place_replicas", "release_all"}
                    if taken:
                        offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {', '.join(sorted(taken))}")
    assert offenders == [], "\n".join(offenders)


def test_the_scan_sees_the_calls_it_polices():
    # The mover itself is found making each call it is allowed to make (the scan is not blind).
    names = {name for name, _ in _called_names(REPO / "scheduler" / "services" / "moving.py")}
    assert {"evict_pod", "release_replica", "place_replicas"} <= names
