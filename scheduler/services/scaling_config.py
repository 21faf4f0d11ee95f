"""A deployment's autoscale settings: the settings' ``AUTOSCALE`` with its own overrides."""
from __future__ import annotations

from typing import Any

from django.conf import settings

from lifecycle.errors import InvalidRequest
from scheduler.core.autoscale import POLICIES, AutoscaleSettings
from scheduler.models import Deployment


def autoscale_settings(deployment: Deployment) -> AutoscaleSettings:
    """The settings' ``AUTOSCALE`` with the deployment's overrides over them."""
    base = AutoscaleSettings.from_dict(getattr(settings, "AUTOSCALE", {}) or None)
    return AutoscaleSettings.from_dict(deployment.autoscale_settings or None, base)


def validate_autoscale(policy: str, overrides: Any) -> dict[str, float]:
    """The checked overrides for ``policy``; raises ``InvalidRequest`` with field messages."""
    errors: dict[str, list[str]] = {}
    if policy and policy not in POLICIES:
        errors["autoscale_policy"] = [f"must be one of {', '.join(POLICIES)} (or empty: off)"]
    if overrides in (None, ""):
        overrides = {}
    if not isinstance(overrides, dict):
        errors["autoscale_settings"] = ["must be an object of setting names to numbers"]
    else:
        try:
            AutoscaleSettings.from_dict(overrides)
        except (TypeError, ValueError) as error:
            errors["autoscale_settings"] = [str(error)]
    if errors:
        raise InvalidRequest(errors)
    return {str(k): float(v) for k, v in overrides.items()}
