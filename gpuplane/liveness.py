"""Is this container's process alive? The probe behind the image's HEALTHCHECK and the
Kubernetes exec probes of the processes that serve no HTTP.

Celery worker and beat touch the file named by GPUPLANE_LIVENESS_FILE while their loops run (the
worker on every broker heartbeat, beat on every tick: gpuplane/celery.py); the probe checks its
age. `python -m gpuplane.liveness` with no argument looks at what the container runs (its PID 1)
and probes that: gunicorn through GET /healthz, Celery through the file, anything else (the node
agent, a one-off command) counts as alive while it runs. Pure Python, no Django: a probe runs
every few seconds and must start fast.
"""
from __future__ import annotations

import os
import ssl
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

ENV_FILE = "GPUPLANE_LIVENESS_FILE"
DEFAULT_MAX_AGE_S = 60.0
HTTP_TIMEOUT_S = 5.0


def touch(environ: Mapping[str, str] = os.environ) -> None:
    """Mark the loop alive now (nothing when GPUPLANE_LIVENESS_FILE is unset, as under `make run`)."""
    path = environ.get(ENV_FILE)
    if path:
        Path(path).touch()


def file_is_fresh(path: str, max_age_s: float, now: float | None = None) -> bool:
    """True when `path` exists and was touched less than `max_age_s` seconds ago."""
    try:
        modified = os.stat(path).st_mtime
    except OSError:
        return False
    return (time.time() if now is None else now) - modified < max_age_s


def healthz_answers(url: str) -> bool:
    """True when GET `url` answers 200 (a self-signed certificate is accepted: this is the
    process's own listener, reached on loopback)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except OSError:
        return False


def probe_for(cmdline: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Probe the process started as `cmdline` (the container's PID 1)."""
    words = " ".join(cmdline)
    if "gunicorn" in words:
        host_port = environ.get("GPUPLANE_BIND", "0.0.0.0:8000")
        port = host_port.rsplit(":", 1)[-1]
        scheme = "https" if environ.get("GPUPLANE_TLS_CERT_FILE") else "http"
        return healthz_answers(f"{scheme}://127.0.0.1:{port}/healthz")
    if "celery" in words and environ.get(ENV_FILE):
        return file_is_fresh(environ[ENV_FILE], DEFAULT_MAX_AGE_S)
    return True


def main(argv: Sequence[str]) -> int:
    """`python -m gpuplane.liveness [FILE [MAX_AGE_S]]`: exit 0 when alive, 1 when not."""
    if argv:
        max_age_s = float(argv[1]) if len(argv) > 1 else DEFAULT_MAX_AGE_S
        return 0 if file_is_fresh(argv[0], max_age_s) else 1
    try:
        cmdline = Path("/proc/1/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        cmdline = []
    return 0 if probe_for(cmdline, os.environ) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
