"""The CLI reads the API's fields by the names the OpenAPI schema gives them: every key the
command modules read from an answer (``item.get("utilization_pct")``, ``plan["id"]``) is a
property somewhere in `/api/schema/`, so a field renamed on the server fails here rather than
printing ``<none>``. The decision matrix (a free-form object in the schema) is left to the
end-to-end test, which renders a real one."""
from __future__ import annotations

import ast
from pathlib import Path

from drf_spectacular.generators import SchemaGenerator

from tests.cli.running import REPO

CLI = REPO / "gpuplane_cli"
# Modules that read API answers; config, client, context, main and bodies read files, headers and flags.
API_READERS = ["resources.py", "rollout_text.py", "errors.py", *(f"commands/{p.name}" for p in (CLI / "commands").glob("*.py"))]


def keys_read(path: Path) -> set[str]:
    """String keys of ``x.get("key", ...)`` calls and ``x["key"]`` subscripts."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant)):
            keys.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
    return {key for key in keys if isinstance(key, str) and key.isidentifier()}


def schema_properties(node: object) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("properties"), dict):
            found.update(node["properties"])
        for value in node.values():
            found |= schema_properties(value)
    elif isinstance(node, list):
        for value in node:
            found |= schema_properties(value)
    return found


def test_every_field_the_cli_reads_is_in_the_openapi_schema():
    read = {key: module for module in API_READERS for key in keys_read(CLI / module)}
    assert {"utilization_pct", "power_w", "progress_percent", "savings_per_hour", "token"} <= set(read)
    documented = schema_properties(SchemaGenerator().get_schema(request=None, public=True))
    assert {f"{module}: {key}" for key, module in read.items() if key not in documented} == set()
