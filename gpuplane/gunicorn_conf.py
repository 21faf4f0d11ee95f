"""gunicorn's configuration in the image: `deploy/image/entrypoint web` (and `webhook`, with TLS).

Read from the environment: GPUPLANE_BIND (default 0.0.0.0:8000), WEB_CONCURRENCY (worker
processes, default 2), GPUPLANE_WEB_THREADS (threads per worker, default 4), and for the admission
webhook, which the API server reaches only over TLS, GPUPLANE_TLS_CERT_FILE and
GPUPLANE_TLS_KEY_FILE. Logs go through gpuplane.logs (JSON lines in production).
"""
from __future__ import annotations

import os

from gpuplane.gunicorn_hooks import post_worker_init  # noqa: F401 - gunicorn reads the hooks from here
from gpuplane.logs import logging_config

bind = [os.environ.get("GPUPLANE_BIND", "0.0.0.0:8000")]
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("GPUPLANE_WEB_THREADS", "4"))
certfile = os.environ.get("GPUPLANE_TLS_CERT_FILE") or None
keyfile = os.environ.get("GPUPLANE_TLS_KEY_FILE") or None
# Kubernetes gives a pod 30 s after SIGTERM: finish in-flight requests well inside that.
graceful_timeout = 20
timeout = 60
# The workers' heartbeat files: memory, not the (read-only) image.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
# Nothing uses gunicorn's control socket, and its default folder is not writable in the image.
control_socket_disable = True
accesslog = "-"
logconfig_dict = logging_config(
    level=os.environ.get("LOG_LEVEL", "INFO"), json_lines=os.environ.get("GPUPLANE_ENV") == "production"
) | {"loggers": {"gunicorn.error": {"propagate": True}, "gunicorn.access": {"propagate": True}}}
