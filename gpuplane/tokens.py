"""User API tokens: `POST /api/v1/auth/token/` with a username and password, then `Authorization: Token <key>`.

django-rest-knox keeps them: the database holds a SHA-512 digest of each key (and its first 15
characters, to find the row), never the key itself, so a copy of the database file gives no
way in. Each key expires settings.GPUPLANE_API_TOKEN_TTL_H hours after it is issued. The key is
shown once, in the answer that issues it; every request issues a new one (the old ones stay
valid until they expire or an admin deletes them under "Knox > Auth tokens"). The endpoint
is gpuplane/token_api.py; this module holds only the authentication class, which DRF's settings
import early (so it must not import views).

Keys issued before (DRF's authtoken kept them in plain text) were turned into digests by
migration gpuplane 0001 and keep working until their expiry.
"""
from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication


class APITokenAuthentication(TokenAuthentication):
    """knox's token check under gpuplane's name, so the schema calls the scheme `tokenAuth`."""


class APITokenScheme(OpenApiAuthenticationExtension):
    target_class = "gpuplane.tokens.APITokenAuthentication"
    name = "tokenAuth"
    priority = 1  # over drf-spectacular's own knox extension, which matches the parent class

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")
