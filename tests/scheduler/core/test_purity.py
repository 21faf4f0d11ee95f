"""scheduler/core stays pure: no Django, no ORM, nothing but stdlib, numpy, croniter (cron arithmetic for
maintenance windows) and the pure node modules."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "scheduler" / "core"
PURE_LIBRARIES = ("numpy", "croniter")  # no Django, no I/O
ALLOWED_PROJECT = ("nodes.catalog", "nodes.mig", "nodes.contract", "nodes.vocabulary", "scheduler.core")
FORBIDDEN = ("django", "rest_framework", "celery", "gpuplane", "nodes.models", "scheduler.models")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports would dodge the check below
                names.append("." * node.level + (node.module or ""))
            else:
                names.append(node.module or "")
    return names


def _allowed(name: str) -> bool:
    top = name.split(".")[0]
    if name.startswith(FORBIDDEN) or any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
        return False
    if top in sys.stdlib_module_names or top in PURE_LIBRARIES:
        return True
    return any(name == allowed or name.startswith(allowed + ".") for allowed in ALLOWED_PROJECT)


SOURCES = sorted(CORE.rglob("*.py"))


def test_the_core_has_sources_to_check():
    assert len(SOURCES) > 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(CORE)))
def test_every_import_is_stdlib_numpy_or_a_pure_module(path):
    bad = [name for name in _imports(path) if not _allowed(name)]
    assert bad == [], f"{path.relative_to(CORE)} imports {bad}"


def test_the_checker_itself_rejects_django_and_orm_imports():
    for name in ("django.db", "rest_framework", "celery", "gpuplane.settings", "nodes.models", "scheduler.models",
                 "nodes.inventory.sync", "requests", ".sibling"):
        assert not _allowed(name), name
    for name in ("numpy", "dataclasses", "nodes.catalog", "nodes.mig", "nodes.contract", "nodes.vocabulary",
                 "scheduler.core.types"):
        assert _allowed(name), name


def test_importing_the_core_loads_no_django():
    code = (
        "import sys, scheduler.core, scheduler.core.profiles, scheduler.core.plugins; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework', 'celery', 'gpuplane')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=CORE.parents[1], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(CORE.parents[1])}, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
