"""URL credentials are masked everywhere they could leave the process (issue 8).

A 500 page (DEBUG), an error mail, a log line, and `make run`'s console must never show the
password of DATABASE_URL, REDIS_URL (= the broker and the cache), or any other URL.
"""
from __future__ import annotations

import io
import logging
import sys

import pytest
from celery.signals import after_setup_logger, after_setup_task_logger
from django.test import RequestFactory
from django.views.debug import technical_500_response

from gpuplane.management.commands.run_gpuplane import ProcessSpec, Supervisor
from gpuplane.redaction import MASK, CredentialMaskingLogFilter, mask_url_credentials

SECRET = "hunter2-redis-pw"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"redis://:{SECRET}@cache:6379/0", f"redis://:{MASK}@cache:6379/0"),
        (f"rediss://default:{SECRET}@cache:6380/1", f"rediss://default:{MASK}@cache:6380/1"),
        (f"postgres://gp:{SECRET}@db.internal:5432/gpuplane", f"postgres://gp:{MASK}@db.internal:5432/gpuplane"),
        (f"https://{SECRET}@prometheus.example/api", f"https://{MASK}@prometheus.example/api"),
        (f"connect to 'amqp://u:{SECRET}@mq//' failed", f"connect to 'amqp://u:{MASK}@mq//' failed"),
        (f"redis://cache:6379/0?password={SECRET}&db=1", f"redis://cache:6379/0?password={MASK}&db=1"),
        ("redis://cache:6379/0 and mail@example.com", "redis://cache:6379/0 and mail@example.com"),
        ("filesystem://localhost//", "filesystem://localhost//"),
    ],
)
def test_it_masks_the_credential_of_any_url(text, expected):
    assert mask_url_credentials(text) == expected


def test_two_urls_on_one_line_are_both_masked():
    line = f"db=postgres://a:{SECRET}@db/x broker=redis://:{SECRET}@r:6379/0"
    assert SECRET not in mask_url_credentials(line)


@pytest.fixture
def secret_urls(settings):
    settings.REDIS_URL = f"redis://:{SECRET}@cache.internal:6379/0"
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    settings.GPUPLANE_PROMETHEUS_URL = f"https://scraper:{SECRET}@prometheus.internal"
    settings.CACHES = {"default": {"BACKEND": "x", "LOCATION": settings.REDIS_URL}}
    settings.DEBUG = True


def _raise_with_a_url_inside():
    broker = f"redis://:{SECRET}@cache.internal:6379/0"  # a frame variable  # noqa: F841
    raise ConnectionError(f"Error connecting to redis://:{SECRET}@cache.internal:6379/0")


def test_the_debug_500_page_masks_settings_frame_variables_and_the_message(secret_urls):
    request = RequestFactory().get("/")
    try:
        _raise_with_a_url_inside()
    except ConnectionError:
        response = technical_500_response(request, *sys.exc_info())

    page = response.content.decode()
    assert "REDIS_URL" in page and "CELERY_BROKER_URL" in page  # the settings are there...
    assert SECRET not in page  # ...without the password
    assert MASK in page


def test_the_plain_text_500_report_is_masked_too(secret_urls):
    # Error mails (AdminEmailHandler) and clients asking for text get the text report.
    request = RequestFactory().get("/", HTTP_ACCEPT="text/plain")
    try:
        _raise_with_a_url_inside()
    except ConnectionError:
        response = technical_500_response(request, *sys.exc_info())

    assert response["Content-Type"].startswith("text/plain")
    assert SECRET not in response.content.decode()


def test_log_lines_and_tracebacks_are_masked():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(CredentialMaskingLogFilter())
    logger = logging.getLogger("tests.redaction")
    logger.addHandler(handler)
    try:
        logger.warning("broker %s is down", f"redis://:{SECRET}@cache:6379/0")
        try:
            _raise_with_a_url_inside()
        except ConnectionError:
            logger.exception("sync failed")
    finally:
        logger.removeHandler(handler)

    output = stream.getvalue()
    assert "broker redis://:" in output and "Error connecting to" in output
    assert SECRET not in output


def test_the_project_logging_config_masks_the_console():
    root_handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    configured = [h for h in root_handlers if any(isinstance(f, CredentialMaskingLogFilter) for f in h.filters)]
    assert configured, "settings.LOGGING's console handler lost its credential filter"


@pytest.mark.parametrize("signal", [after_setup_logger, after_setup_task_logger], ids=["worker", "task"])
def test_celerys_log_handlers_get_the_filter_once(signal):
    # Celery replaces the root logger's handlers when a worker or beat starts, then sends these signals.
    logger = logging.getLogger("tests.celery-like")
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    try:
        for _ in range(2):
            signal.send(sender=None, logger=logger, loglevel=logging.INFO, logfile=None, format="", colorize=False)
    finally:
        logger.removeHandler(handler)
    assert sum(isinstance(f, CredentialMaskingLogFilter) for f in handler.filters) == 1


def test_make_runs_console_masks_what_the_children_print():
    out = io.StringIO()
    supervisor = Supervisor([ProcessSpec("worker", ("true",))], out=out, stop_timeout_s=1)

    supervisor._emit("worker", f"- ** transport: redis://:{SECRET}@cache:6379/0")
    supervisor.say(f"using postgres://gp:{SECRET}@db/gpuplane")

    assert "transport: redis://" in out.getvalue()
    assert SECRET not in out.getvalue()
