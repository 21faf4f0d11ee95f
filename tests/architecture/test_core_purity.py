"""Rule 1: scheduler/core is pure Python. It imports no framework (Django, DRF, Celery) and no
project module but its own and the pure node vocabulary modules, and neither do the modules it
reaches. (tests/scheduler/core/test_purity.py also checks that importing it loads no Django.)
"""
from __future__ import annotations

import sys

from tests.architecture.graph import PROJECT_PACKAGES, ImportGraph, project_graph

CORE = "scheduler.core"
PURE_NODES_MODULES = ("nodes.catalog", "nodes.mig", "nodes.contract", "nodes.vocabulary")
FRAMEWORKS = ("django", "rest_framework", "celery", "kombu", "django_filters", "drf_spectacular")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def allowed_in_core(name: str) -> bool:
    """Whether a module of scheduler/core may import `name` (an absolute dotted module name)."""
    top = name.split(".")[0]
    if top in FRAMEWORKS:
        return False
    if top in PROJECT_PACKAGES:
        return _within(name, (CORE, *PURE_NODES_MODULES))
    return True


def _reached_from_core(graph: ImportGraph) -> set[str]:
    """Every project module that importing the core runs: its imports, theirs, and their packages."""
    edges = graph.edges(include_type_checking=True)
    reached: set[str] = set()
    pending = graph.modules_under(CORE)
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        reached.add(module)
        parents = [".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)]
        pending.extend(m for m in [*edges[module], *parents] if m in graph.paths)
    return reached


def test_the_core_has_modules_to_check():
    assert len(project_graph().modules_under(CORE)) > 10


def test_core_modules_import_no_framework_and_only_pure_project_modules():
    graph = project_graph()
    bad = [
        f"{graph.relative(module)}: {imported.describe()}"
        for module in graph.modules_under(CORE)
        for imported in graph.imports[module]
        if not allowed_in_core(imported.name)
    ]
    assert bad == [], "scheduler/core must stay pure:\n" + "\n".join(bad)


def test_the_modules_the_core_reaches_are_pure_too():
    graph = project_graph()
    reached = _reached_from_core(graph)
    parents_of_allowed = {"nodes", "scheduler"}  # package __init__s Python runs on the way
    outside = sorted(m for m in reached if not _within(m, (CORE, *PURE_NODES_MODULES)) and m not in parents_of_allowed)
    assert outside == [], f"importing scheduler.core loads other project modules: {outside}"
    framework = [
        f"{graph.relative(module)}: {imported.describe()}"
        for module in sorted(reached)
        for imported in graph.imports[module]
        if imported.name.split(".")[0] in FRAMEWORKS
    ]
    assert framework == [], "a module the core imports uses a framework:\n" + "\n".join(framework)


def test_the_rule_itself():
    for name in ("django.db", "rest_framework.fields", "celery", "kombu", "gpuplane.settings", "nodes.models",
                 "nodes.inventory.sync", "nodes.cluster.base", "scheduler.models", "scheduler.adapters", "scheduler",
                 "nodes", "lifecycle.transitions", "tests.scheduler.core.builders"):
        assert not allowed_in_core(name), name
    for name in ("numpy", "dataclasses", "collections.abc", "nodes.catalog", "nodes.mig", "nodes.contract",
                 "nodes.vocabulary", "scheduler.core", "scheduler.core.plugins.gpu_memory_fit"):
        assert allowed_in_core(name), name
    assert "typing" in sys.stdlib_module_names  # the stdlib needs no list: anything not a project module passes
