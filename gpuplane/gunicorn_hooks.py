"""gunicorn server hooks (``--config python:gpuplane.gunicorn_hooks``, see ``run_gpuplane``)."""
from __future__ import annotations

from typing import Any


def post_worker_init(worker: Any) -> None:
    """Each worker, once the application is loaded: import every view now (not in the worker's
    first request) and warm its placement snapshot in the background."""
    from django.urls import get_resolver

    from scheduler.services import snapshot_warmer

    get_resolver().url_patterns  # noqa: B018 - imports the URLconf and with it every view
    snapshot_warmer.start()
