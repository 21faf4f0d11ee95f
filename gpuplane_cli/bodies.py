"""Request bodies from the command line: flags, `-f FILE` (YAML or JSON, `-` for standard input)
and `--set key=value` for any field the flags do not name (a field the server gained after this
CLI was written included): dotted keys nest (``config.replicas=4``), values read as YAML
scalars (``4`` a number, ``true`` a boolean, ``[a, b]`` a list)."""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuplane_cli.errors import UsageError


def key_value(text: str, flag: str) -> tuple[str, str]:
    """``"a=b"`` -> ``("a", "b")``; a UsageError naming ``flag`` otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"error: {flag} takes KEY=VALUE, got {text!r}")
    return key.strip(), value


def string_map(pairs: Iterable[str] | None, flag: str) -> dict[str, str]:
    """Repeated ``--label k=v`` flags (or ``k=v,k2=v2`` in one) as a mapping of strings."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        for part in pair.split(","):
            key, value = key_value(part, flag)
            result[key] = value
    return result


def set_values(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``--set`` flags as a nested mapping (see the module docstring)."""
    body: dict[str, Any] = {}
    for pair in pairs or []:
        key, raw = key_value(pair, "--set")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        *parents, last = key.split(".")
        node = body
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UsageError(f"error: --set {key}: {part} is already set to a value")
            node = child
        node[last] = value
    return body


def read_file(path: str | None) -> dict[str, Any]:
    """The mapping in a YAML or JSON file (``-``: standard input); empty without a path."""
    if not path:
        return {}
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"error: cannot read {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"error: {path} is not valid YAML or JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"error: {path} must hold one object (a mapping of fields)")
    return data


def merged(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Later layers win; nested mappings merge key by key; None values are left out."""
    result: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is None:
                continue
            if isinstance(value, Mapping):
                result[key] = merged(result[key] if isinstance(result.get(key), dict) else {}, value)
            else:
                result[key] = value
    return result
