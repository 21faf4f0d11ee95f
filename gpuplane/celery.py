"""The Celery application; configuration comes from Django settings (CELERY_* names)."""
import logging
import os
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    before_task_publish,
    heartbeat_sent,
    worker_ready,
)

from gpuplane import liveness
from gpuplane.redaction import mask_handlers

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

# A process started by `make run`'s supervisor (gpuplane/supervisor.py) has this in its
# environment; the messages it sends carry it as a header, so that the test suite's broker
# check (tests/leaks.py) can tell a running server's messages from a leak of its own.
SERVER_ID_ENV = "GPUPLANE_SERVER_ID"
SERVER_HEADER = "gpuplane_server"

app = Celery("gpuplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _mask_credentials_in_logs(logger: logging.Logger, **kwargs: object) -> None:
    """Celery replaces the root logger's handlers with its own: mask URL credentials there too."""
    mask_handlers(logger)


@before_task_publish.connect
def _mark_server_messages(headers: dict | None = None, **kwargs: object) -> None:
    marker = os.environ.get(SERVER_ID_ENV)
    if marker and headers is not None:
        headers[SERVER_HEADER] = marker


@worker_ready.connect
@heartbeat_sent.connect
def _worker_alive(**kwargs: object) -> None:
    """The worker's consumer runs (heartbeats go out every 2 s): say so to the liveness probe."""
    liveness.touch()


class LivenessScheduler(PersistentScheduler):
    """Celery beat's default scheduler, telling the liveness probe on every tick that its loop runs."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        liveness.touch()
        return float(super().tick(*args, **kwargs))
