"""A real Prometheus for the tests (bench/prometheus_server.py starts it), and what to do without one.

Where the binary is absent the tests skip, except in CI (CI=true), where that fails the run:
.ci/run installs it, as it installs Chromium for the browser tests.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest


def require_prometheus(executable: Path, environ: Mapping[str, str]) -> None:
    """Skip where Prometheus is absent, except in CI (CI=true), where that fails the run."""
    if executable.exists():
        return
    if environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"CI=true but {executable} is missing: the Prometheus store tests cannot run "
                    "(.ci/run installs prometheus)", pytrace=False)
    pytest.skip(f"Debian prometheus not installed ({executable} missing; apt-get install prometheus); .ci/run installs it")
