"""The import-graph builder on a small made-up project, so that the rules above can trust it."""
from __future__ import annotations

from pathlib import Path

from tests.architecture.graph import (
    build_graph,
    describe_cycle,
    line_count,
    module_name,
    shortest_cycle,
    strongly_connected,
)

FILES = {
    "app/__init__.py": "",
    "app/models.py": "import os\nfrom app import helpers\n",
    "app/helpers.py": "from app.models import Thing\n",
    "app/pkg/__init__.py": "from .leaf import VALUE\n",
    "app/pkg/leaf.py": (
        "from typing import TYPE_CHECKING\n"
        "from .. import models\n"
        "if TYPE_CHECKING:\n"
        "    from app.views import Page\n"
        "else:\n"
        "    import json\n"
        "def later():\n"
        "    from app.views import render\n"
        "    import importlib\n"
        "    return importlib.import_module('other.views')\n"
    ),
    "app/views.py": "from app.pkg import VALUE\nfrom app.pkg import leaf\nimport app.pkg.leaf\nimport django.db\n",
    "other/__init__.py": "",
    "other/views.py": "from app import views\n",
}


def _project(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_module_names(tmp_path):
    assert module_name(tmp_path, tmp_path / "app/__init__.py") == "app"
    assert module_name(tmp_path, tmp_path / "app/pkg/leaf.py") == "app.pkg.leaf"


def test_imports_are_resolved_to_project_modules(tmp_path):
    graph = build_graph(_project(tmp_path), ["app", "other", "missing"])
    assert sorted(graph.paths) == ["app", "app.helpers", "app.models", "app.pkg", "app.pkg.leaf", "app.views",
                                   "other", "other.views"]
    assert [(i.name, i.target, i.line, i.in_function, i.type_checking) for i in graph.imports["app.pkg.leaf"]] == [
        ("typing", None, 1, False, False),
        ("app.models", "app.models", 2, False, False),  # relative, and `from pkg import module` is the module
        ("app.views", "app.views", 4, False, True),
        ("json", None, 6, False, False),  # the else branch of `if TYPE_CHECKING:` runs
        ("app.views", "app.views", 8, True, False),
        ("importlib", None, 9, True, False),
        ("other.views", "other.views", 10, True, False),  # importlib.import_module with a literal name
    ]
    assert [i.name for i in graph.imports["app.pkg"]] == ["app.pkg.leaf"]
    # `from app.pkg import VALUE` is an attribute of the package, `from app.pkg import leaf` the submodule.
    assert [(i.name, i.target) for i in graph.imports["app.views"]] == [
        ("app.pkg", "app.pkg"), ("app.pkg.leaf", "app.pkg.leaf"), ("app.pkg.leaf", "app.pkg.leaf"),
        ("django.db", None),
    ]


def test_edges_skip_type_checking_imports_but_keep_function_level_ones(tmp_path):
    graph = build_graph(_project(tmp_path), ["app", "other"])
    assert set(graph.edges()["app.pkg.leaf"]) == {"app.models", "app.views", "other.views"}
    only_typing = build_graph(tmp_path, ["app"])
    only_typing.imports["app.pkg.leaf"] = [i for i in only_typing.imports["app.pkg.leaf"] if i.type_checking]
    assert set(only_typing.edges()["app.pkg.leaf"]) == set()
    assert set(only_typing.edges(include_type_checking=True)["app.pkg.leaf"]) == {"app.views"}


def test_cycles_are_found_and_reported_as_chains(tmp_path):
    edges = build_graph(_project(tmp_path), ["app", "other"]).edges()
    components = strongly_connected(edges)
    assert components == [
        ["app.helpers", "app.models"],
        ["app.pkg", "app.pkg.leaf", "app.views", "other.views"],
    ]
    assert shortest_cycle(edges, components[0]) == ["app.helpers", "app.models", "app.helpers"]
    assert shortest_cycle(edges, components[1]) == ["app.pkg", "app.pkg.leaf", "app.views", "app.pkg"]
    assert describe_cycle(edges, ["app.helpers", "app.models", "app.helpers"]) == (
        "app.helpers -> app.models -> app.helpers\n"
        "    app.helpers imports app.models (line 1)\n"
        "    app.models imports app.helpers (line 2)"
    )


def test_line_count(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("a = 1\nb = 2\n")
    assert line_count(path) == 2
