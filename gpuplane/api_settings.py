"""DRF's and drf-spectacular's settings: the API's authentication, permissions, filters, paging,
parsers and OpenAPI schema. Constants only (nothing read from the environment); gpuplane/settings.py
imports them."""
from __future__ import annotations

from typing import Any

REST_FRAMEWORK: dict[str, Any] = {
    # Token first so that an anonymous request gets 401 with WWW-Authenticate, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "gpuplane.tokens.APITokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        # `Authorization: Bearer <agent key>`: recognised everywhere so that an agent key is refused
        # with 403 (it holds no role) instead of being ignored; only telemetry accepts it.
        "nodes.authentication.NodeAgentTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["gpuplane.roles.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": [
        # An unknown query parameter is a 400 naming it, not silently ignored (gpuplane/strict_input.py).
        "gpuplane.strict_input.StrictQueryParametersFilter",
        "django_filters.rest_framework.DjangoFilterBackend",
        # DRF's OrderingFilter, but an unknown field is a 400 instead of being ignored.
        "gpuplane.api.StrictOrderingFilter",
    ],
    # DRF's LimitOffsetPagination, limit capped at 500, bad limit/offset a 400.
    "DEFAULT_PAGINATION_CLASS": "gpuplane.api.CappedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    # DRF's JSON, form and multipart parsers with size and nesting limits: any body parses or is a 400.
    "DEFAULT_PARSER_CLASSES": [
        "gpuplane.parsers.LimitedJSONParser",
        "gpuplane.parsers.LimitedFormParser",
        "gpuplane.parsers.LimitedMultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "gpuplane.schema.GpuplaneAutoSchema",
    "EXCEPTION_HANDLER": "gpuplane.api.exception_handler",
}

SPECTACULAR_SETTINGS: dict[str, Any] = {
    "TITLE": "gpuplane API",
    "DESCRIPTION": "Placement and GPU sharing control plane for Kubernetes GPU clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Tag and name operations by resource ("nodes_list"), not by the version prefix ("v1_nodes_list").
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]+",
    # The schema and Swagger UI need the same login and role as the API they describe.
    "SERVE_PERMISSIONS": ["gpuplane.roles.RolePermission"],
    # Swagger UI assets come from the drf-spectacular-sidecar package: served locally, no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # A node's sharing_mode and a sharing config's mode are one vocabulary: one enum in the schema.
    "ENUM_NAME_OVERRIDES": {"SharingModeEnum": "nodes.vocabulary.SharingMode.choices",
                            "PolicyStrategyEnum": "scheduler.policies.POLICY_STRATEGY_CHOICES",
                            "RolloutStrategyEnum": "rollouts.choices.RolloutStrategy.choices"},
    # Form-encoded bodies have no null and no objects: their own components (gpuplane/schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "gpuplane.schema.postprocess_form_bodies"],
}
