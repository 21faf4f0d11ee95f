"""The CLI talks only to the REST API: `gpuplane_cli` imports the standard library, PyYAML and
itself, nothing of the server (no Django, no project app), so `pip install .` can install it
alone on a laptop; and no server module imports it."""
from __future__ import annotations

import sys

from tests.architecture.graph import Import, build_graph, project_graph

CLI = "gpuplane_cli"
ALLOWED_THIRD_PARTY = {"yaml"}


def _foreign(imports: list[Import]) -> list[Import]:
    allowed = set(sys.stdlib_module_names) | ALLOWED_THIRD_PARTY | {CLI, "__future__"}
    return [i for i in imports if i.name.split(".")[0] not in allowed]


def test_the_cli_imports_only_the_standard_library_yaml_and_itself():
    graph = project_graph()
    modules = graph.modules_under(CLI)
    assert f"{CLI}.main" in modules and f"{CLI}.client" in modules
    offenders = [f"{graph.relative(m)}: {i.describe()}" for m in modules for i in _foreign(graph.imports[m])]
    assert offenders == []


def test_no_server_module_imports_the_cli():
    graph = project_graph()
    offenders = [
        f"{graph.relative(module)}: {imported.describe()}"
        for module, imports in graph.imports.items()
        if module.split(".")[0] not in (CLI, "tests")
        for imported in imports if imported.name.split(".")[0] == CLI
    ]
    assert offenders == []


def test_the_check_sees_a_server_import(tmp_path):
    package = tmp_path / CLI
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text("import json\nimport yaml\n\ndef f():\n    from scheduler.models import Deployment\n")
    graph = build_graph(tmp_path, (CLI,))
    foreign = _foreign(graph.imports[f"{CLI}.main"])
    assert [i.name for i in foreign] == ["scheduler.models"] and foreign[0].in_function
