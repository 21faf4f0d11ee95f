"""The Dockerfile read as data, so that the tests build the image's layout from the Dockerfile
itself (what it copies, how it collects static files, its environment and entry point) rather
than from a second description that could drift from it."""
from __future__ import annotations

import fnmatch
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.deploy.rendering import BASE_DIR

DOCKERFILE = BASE_DIR / "Dockerfile"
DOCKERIGNORE = BASE_DIR / ".dockerignore"


@dataclass
class Stage:
    name: str
    copies: list[tuple[list[str], str]] = field(default_factory=list)  # (sources, destination) from the context
    copies_from: list[tuple[str, str, str]] = field(default_factory=list)  # (stage, source, destination)
    runs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    workdir: str = "/"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)


def _instructions(text: str) -> list[tuple[str, str]]:
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        current += " " + line[:-1] if line.endswith("\\") else " " + line
        if not line.endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _exec_form(argument: str) -> list[str]:
    return json.loads(argument) if argument.startswith("[") else ["/bin/sh", "-c", argument]


def stages(text: str | None = None) -> list[Stage]:
    """The build stages of the Dockerfile, in order."""
    result: list[Stage] = []
    for instruction, argument in _instructions(DOCKERFILE.read_text() if text is None else text):
        if instruction == "FROM":
            words = argument.split()
            result.append(Stage(name=words[2] if len(words) > 2 and words[1].upper() == "AS" else str(len(result))))
            continue
        if not result:
            continue  # ARG before the first FROM
        stage = result[-1]
        if instruction == "COPY":
            words = shlex.split(argument)
            flags = [w for w in words if w.startswith("--")]
            paths = [w for w in words if not w.startswith("--")]
            origin = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            if origin:
                stage.copies_from.append((origin, paths[0], paths[-1]))
            else:
                stage.copies.append((paths[:-1], paths[-1]))
        elif instruction == "RUN":
            stage.runs.append(argument)
        elif instruction == "ENV":
            for assignment in shlex.split(argument):
                key, _, value = assignment.partition("=")
                stage.env[key] = value
        elif instruction == "USER":
            stage.user = argument
        elif instruction == "WORKDIR":
            stage.workdir = argument
        elif instruction == "ENTRYPOINT":
            stage.entrypoint = _exec_form(argument)
        elif instruction == "CMD":
            stage.cmd = _exec_form(argument)
        elif instruction == "HEALTHCHECK":
            stage.healthcheck = _exec_form(argument.split(" CMD ", 1)[1])
    return result


def in_build_context(path: str) -> bool:
    """Whether .dockerignore lets `path` (relative to the context) into the build context: the
    last pattern that matches it or one of its parents decides, `!` letting it back in."""
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = Path(path).parts
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]  # a folder's pattern covers its files
    included = True
    for pattern in patterns:
        negated, bare = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        if bare.startswith("**/"):  # any depth: match a file's or folder's own name
            matched = any(fnmatch.fnmatch(Path(prefix).name, bare[3:]) for prefix in prefixes)
        else:
            matched = any(fnmatch.fnmatch(prefix, bare) for prefix in prefixes)
        if matched:
            included = negated
    return included
