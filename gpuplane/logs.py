"""Logging configuration: plain lines for a terminal, one JSON object per line for a log collector.

Production (GPUPLANE_ENV=production, gpuplane/production.py) logs JSON to standard output, where
Kubernetes' container runtime picks it up; `make run` keeps the readable plain lines. Either way
URL credentials are masked in every line (gpuplane/redaction.py). Pure Python: Celery and
gunicorn configure their loggers from this before Django is set up.
"""
from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# LogRecord attributes that are not the caller's `extra=` fields.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JSONFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the exception's
    traceback as `exc_info` when there is one, and any `extra=` fields the caller passed."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        for key, value in vars(record).items():
            if key not in _RECORD_FIELDS and key not in entry:
                entry[key] = value
        # default=str: an extra field that JSON cannot hold is still logged, as its text.
        return json.dumps(entry, default=str)


def logging_config(*, level: str, json_lines: bool) -> dict[str, Any]:
    """Django's LOGGING: everything at `level` and above, credentials masked; JSON lines to standard
    output (what a container's log collector reads), or plain lines to standard error as before."""
    formatter: dict[str, Any] = {"()": "gpuplane.logs.JSONFormatter"} if json_lines else {"format": PLAIN_FORMAT}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "filters": {"mask_credentials": {"()": "gpuplane.redaction.CredentialMaskingLogFilter"}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout" if json_lines else "ext://sys.stderr",
                "formatter": "default",
                "filters": ["mask_credentials"],
            },
        },
        "root": {"handlers": ["console"], "level": level},
    }
