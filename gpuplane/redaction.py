"""Credentials in URLs never leave the process: masked in error reports, log lines and console output.

DATABASE_URL, REDIS_URL (which is also the Celery broker and the cache location),
GPUPLANE_PROMETHEUS_URL and any URL an exception message quotes may carry `user:password@`.
Django's SafeExceptionReporterFilter hides settings by *name* (PASSWORD, SECRET, ...), which
misses REDIS_URL, CELERY_BROKER_URL and CACHES' LOCATION; here every string is masked by *content*
(error reports: gpuplane/error_reports.py; log lines: CredentialMaskingLogFilter below;
`make run`'s console: run_gpuplane). Pure Python, so Celery's logging can use it before Django is set up.
"""
from __future__ import annotations

import logging
import re

MASK = "********"

# scheme://userinfo@ : userinfo is what lies between `//` and the first `@` before any `/` or space.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<userinfo>[^/\s@]+)@")
# Credentials passed as query parameters (`redis://host/0?password=...`).
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&](?:password|passwd|pwd|pass|token|secret|access_token|api_key|apikey)=)[^&\s#'\"<]+",
    re.IGNORECASE,
)


def _mask_userinfo(match: re.Match[str]) -> str:
    user, sep, _password = match["userinfo"].partition(":")
    # `user:password@` keeps the user name; a lone `token@` is a credential itself.
    return f"{match['scheme']}{user}:{MASK}@" if sep else f"{match['scheme']}{MASK}@"


def mask_url_credentials(text: str) -> str:
    """`text` with the password (or token) of every URL in it replaced by MASK."""
    if "@" in text:
        text = _URL_USERINFO.sub(_mask_userinfo, text)
    if "=" in text:
        text = _QUERY_SECRET.sub(lambda m: m["key"] + MASK, text)
    return text


class CredentialMaskingLogFilter(logging.Filter):
    """A handler filter: the record's message and traceback with URL credentials masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_url_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_url_credentials(record.exc_text)
        return True


def mask_handlers(logger: logging.Logger) -> None:
    """Add the masking filter to each of `logger`'s handlers (once), e.g. after Celery set them up."""
    for handler in logger.handlers:
        if not any(isinstance(existing, CredentialMaskingLogFilter) for existing in handler.filters):
            handler.addFilter(CredentialMaskingLogFilter())
