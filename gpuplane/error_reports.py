"""Django error reports (DEBUG pages, mails to ADMINS) with every URL credential masked.

Settings: DEFAULT_EXCEPTION_REPORTER_FILTER and DEFAULT_EXCEPTION_REPORTER.
"""
from __future__ import annotations

from typing import Any

from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

from gpuplane.redaction import mask_url_credentials


class CredentialMaskingReporterFilter(SafeExceptionReporterFilter):
    """Django's filter (settings hidden by name), plus URL credentials masked in every string.

    Applies to settings, request data and frame variables shown in DEBUG pages and in error mails.
    """

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        return mask_url_credentials(cleansed) if isinstance(cleansed, str) else cleansed

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> Any:
        return [
            (name, mask_url_credentials(value) if isinstance(value, str) else value)
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]


class CredentialMaskingExceptionReporter(ExceptionReporter):
    """The rendered report masked as a whole: also catches a URL inside an exception message
    or inside the repr of an object that the filter could only see as an object."""

    def get_traceback_html(self) -> Any:
        return mask_url_credentials(str(super().get_traceback_html()))

    def get_traceback_text(self) -> Any:
        return mask_url_credentials(str(super().get_traceback_text()))
