"""The Celery application; configuration comes from Django settings (CELERY_* names)."""
import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

from gpuplane.redaction import mask_handlers

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplane.settings")

app = Celery("gpuplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _mask_credentials_in_logs(logger: logging.Logger, **kwargs: object) -> None:
    """Celery replaces the root logger's handlers with its own: mask URL credentials there too."""
    mask_handlers(logger)
