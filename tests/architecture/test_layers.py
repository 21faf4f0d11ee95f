"""Rules 2 and 4: which project modules each app may import.

- nodes (what the cluster is) never imports scheduler (what runs where): not at module level, not
  inside a function, not even for type checking.
- the apps never import the project's top layer (the dashboard views, the URLconf, the API glue);
  of gpuplane they use only its base modules.
- nothing outside tests/ imports tests (a benchmark runs without the test package).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

from tests.architecture.graph import PROJECT_PACKAGES, project_graph

APPS = ("nodes", "scheduler", "lifecycle", "rollouts", "savings", "consolidation")
GPUPLANE_TOP_LAYER = ("gpuplane.views", "gpuplane.urls", "gpuplane.api")
GPUPLANE_BASE = (
    "gpuplane.env", "gpuplane.roles", "gpuplane.observability", "gpuplane.celery", "gpuplane.web", "gpuplane.parsers",
    # What every API view shares: strict input parsing, and the API token authentication class.
    "gpuplane.strict_input", "gpuplane.tokens",
)


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _imports_of(package: str, predicate: Callable[[str], bool]) -> list[str]:
    graph = project_graph()
    return [
        f"{graph.relative(module)}: {imported.describe()}"
        for module in graph.modules_under(package)
        for imported in graph.imports[module]
        if predicate(imported.name)
    ]


def test_nodes_never_imports_scheduler():
    bad = _imports_of("nodes", lambda name: _within(name, ("scheduler",)))
    assert bad == [], "nodes must not depend on scheduler:\n" + "\n".join(bad)


def test_nodes_does_not_reach_scheduler_through_another_module():
    # nodes -> lifecycle -> scheduler (or through gpuplane) would be the same dependency, hidden.
    graph = project_graph()
    edges = graph.edges(include_type_checking=True)
    previous: dict[str, str] = {}
    queue = deque(graph.modules_under("nodes"))
    seen = set(queue)
    while queue:
        module = queue.popleft()
        for imported in sorted(edges[module]):
            if imported in seen or _within(imported, ("tests", "bench")):
                continue
            seen.add(imported)
            previous[imported] = module
            queue.append(imported)
    # Only where the path enters scheduler: what scheduler imports next adds nothing.
    reached = sorted(m for m in previous if _within(m, ("scheduler",)) and not _within(previous[m], ("scheduler",)))
    chains = []
    for target in reached:
        chain = [target]
        while chain[-1] in previous:
            chain.append(previous[chain[-1]])
        chains.append(" -> ".join(reversed(chain)))
    assert chains == [], "nodes reaches scheduler through other modules:\n" + "\n".join(chains)


def test_the_apps_never_import_the_top_layer():
    bad = [line for app in APPS for line in _imports_of(app, lambda name: _within(name, GPUPLANE_TOP_LAYER))]
    assert bad == [], "the apps must not import gpuplane's dashboard, URLconf or API glue:\n" + "\n".join(bad)


def test_the_apps_use_only_gpuplane_base_modules():
    def outside_base(name: str) -> bool:
        return _within(name, ("gpuplane",)) and not _within(name, GPUPLANE_BASE)

    bad = [line for app in APPS for line in _imports_of(app, outside_base)]
    assert bad == [], f"the apps may import only {', '.join(GPUPLANE_BASE)} of gpuplane:\n" + "\n".join(bad)


def test_the_shared_page_helpers_import_only_base_modules():
    # gpuplane.web is what app pages import instead of the dashboard, so it must stay below the apps.
    graph = project_graph()
    project = [i for i in graph.imports["gpuplane.web"] if i.target is not None]
    assert [i.describe() for i in project if not _within(i.name, GPUPLANE_BASE)] == []


def test_only_the_top_layer_imports_rollouts():
    # Rollouts move deployments and change nodes, so they sit above nodes, scheduler and lifecycle.
    bad = [line for app in ("nodes", "scheduler", "lifecycle")
           for line in _imports_of(app, lambda name: _within(name, ("rollouts",)))]
    assert bad == [], "nodes, scheduler and lifecycle must not depend on rollouts:\n" + "\n".join(bad)


def test_only_the_tests_import_tests():
    # What tests and benchmarks share (a Prometheus process, a fleet loader) lives in bench/ or the apps.
    bad = [line for package in PROJECT_PACKAGES if package != "tests"
           for line in _imports_of(package, lambda name: _within(name, ("tests",)))]
    assert bad == [], "only tests/ may import tests:\n" + "\n".join(bad)


def test_only_the_top_layer_imports_consolidation():
    # Consolidation moves replicas between nodes (scheduler's services, rollouts' tick lock): it
    # sits above the apps it uses, which never import it back.
    bad = [line for app in ("nodes", "scheduler", "lifecycle", "rollouts", "savings")
           for line in _imports_of(app, lambda name: _within(name, ("consolidation",)))]
    assert bad == [], "nodes, scheduler, lifecycle, rollouts and savings must not depend on consolidation:\n" + "\n".join(bad)
