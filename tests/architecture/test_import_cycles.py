"""Rule 5: no import cycle between project modules.

Edges count imports inside functions too (a cycle hidden in a function is still a knot in the
design) but not those under `if TYPE_CHECKING:`, which never run.
"""
from __future__ import annotations

from tests.architecture.graph import describe_cycle, project_graph, shortest_cycle, strongly_connected


def test_no_import_cycle_between_project_modules():
    edges = project_graph().edges()
    components = strongly_connected(edges)
    report = [
        f"{len(component)} modules import each other ({', '.join(component)}); for example:\n"
        + describe_cycle(edges, shortest_cycle(edges, component))
        for component in components
    ]
    assert report == [], "import cycles:\n" + "\n".join(report)
