"""Diagnostic Celery tasks for the project itself (not for any domain app)."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="gpuplane.tasks.ping_task")
def ping_task() -> str:
    """Return "pong"; proves that a message went broker -> worker -> task body.

    Used by the broker smoke tests and handy by hand:
    `python manage.py shell -c "from gpuplane.tasks import ping_task; ping_task.delay()"`
    and look for the worker's "succeeded ... 'pong'" log line.
    """
    return "pong"
