"""`make run` and the image install what runs and nothing else: requirements.txt holds no test or
lint tool, not even as a dependency of a dependency; `make test` and CI add requirements-dev.txt."""
from __future__ import annotations

import re
import subprocess
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.rendering import BASE_DIR


def requirement_lines(name: str) -> list[str]:
    lines = [line.split("#")[0].strip() for line in (BASE_DIR / name).read_text().splitlines()]
    return [line for line in lines if line]


def closure(requirements: list[str]) -> set[str]:
    """Every distribution these requirements install, as installed here (markers evaluated, extras followed)."""
    seen: set[str] = set()
    todo = [Requirement(line) for line in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = f"{name}[{','.join(sorted(requirement.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        for dependency in metadata.requires(requirement.name) or []:
            parsed = Requirement(dependency)
            environment = [{"extra": extra} for extra in requirement.extras] or [{"extra": ""}]
            if parsed.marker is None or any(parsed.marker.evaluate(env) for env in environment):
                todo.append(parsed)
    return {entry for entry in seen if "[" not in entry}


def dry_run(target: str, tmp_path) -> list[str]:
    """The commands `make <target>` would run on a fresh clone (no .venv yet)."""
    result = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=BASE_DIR,
                            capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.splitlines()


def installs(commands: list[str]) -> list[str]:
    return [re.search(r"-r (\S+)", line)[1] for line in commands if "pip install" in line]  # type: ignore[index]


def test_make_run_installs_only_the_runtime_requirements(tmp_path):
    assert installs(dry_run("run", tmp_path)) == ["requirements.txt"]


def test_make_test_installs_the_test_and_lint_tools_too(tmp_path):
    assert installs(dry_run("test", tmp_path)) == ["requirements.txt", "requirements-dev.txt"]
    assert requirement_lines("requirements-dev.txt")[0] == "-r requirements.txt"


def test_no_test_or_lint_tool_is_a_runtime_requirement_even_indirectly():
    runtime = closure(requirement_lines("requirements.txt"))
    dev_only = {canonicalize_name(Requirement(line).name) for line in requirement_lines("requirements-dev.txt")[1:]}
    assert {"pytest", "ruff", "mypy", "playwright", "hypothesis"} <= dev_only  # the file is what we think it is
    assert {"django", "celery", "gunicorn", "psycopg-binary"} <= runtime  # ...and so is the closure
    assert sorted(runtime & dev_only) == []
