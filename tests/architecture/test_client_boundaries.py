"""Rule 7: each hardware or cluster client library is imported by exactly one module.

The kubernetes client only by nodes/cluster/kubernetes.py, pynvml only by nodes/collectors/nvml.py;
everything else reaches the cluster through the nodes.cluster backends and the GPUs through the
collectors.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tests.architecture.graph import project_graph

REPO = Path(__file__).resolve().parents[2]
# client library -> the one project module allowed to import it
CLIENT_OWNERS = {"kubernetes": "nodes.cluster.kubernetes", "pynvml": "nodes.collectors.nvml"}
# tests and benchmarks may import a client to fake it; the application may not
APPLICATION = ("nodes", "scheduler", "gpuplane", "lifecycle")


# --- dependency rule ----------------------------------------------------------------------


def _imports_kubernetes(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "kubernetes" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "kubernetes":
            return True
    return False


def test_no_other_module_imports_the_kubernetes_client():
    allowed = REPO / "nodes" / "cluster" / "kubernetes.py"
    offenders = [
        str(path.relative_to(REPO))
        for package in ("nodes", "scheduler", "gpuplane")
        for path in sorted((REPO / package).rglob("*.py"))
        if path != allowed and _imports_kubernetes(path)
    ]

    assert offenders == []
    assert _imports_kubernetes(allowed)  # the check itself sees an import where there is one


def test_each_client_library_is_imported_by_its_one_module_only():
    graph = project_graph()
    offenders = [
        f"{graph.relative(module)}: {imported.describe()}"
        for package in APPLICATION
        for module in graph.modules_under(package)
        for imported in graph.imports[module]
        if (top := imported.name.split(".")[0]) in CLIENT_OWNERS and CLIENT_OWNERS[top] != module
    ]
    assert offenders == [], "client libraries imported outside their module:\n" + "\n".join(offenders)
    for client, owner in CLIENT_OWNERS.items():
        assert any(i.name.split(".")[0] == client for i in graph.imports[owner]), f"{owner} no longer imports {client}"
