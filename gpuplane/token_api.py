"""`/api/v1/auth/token/`: issue an API token for a username and password, or revoke your own.

`POST` answers 200 `{"token": ..., "expiry": ...}`; 400 for wrong credentials or an unknown
field; 429 with Retry-After past settings.GPUPLANE_TOKEN_RATE requests per address or too many
failed sign-ins for the account (gpuplane/ratelimits.py). `DELETE`, authenticated with the token
(`Authorization: Token <key>`), revokes that token; `DELETE ?all=true` (a token or a session)
revokes every token of the caller. Both 204; 401 without credentials. Issuing and revoking are
audit events (`token.created`, `token.revoked`: gpuplane/accounts.py).
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from knox.models import AuthToken
from rest_framework import exceptions, serializers
from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.accounts import record_token_created, revoke_tokens
from gpuplane.ratelimits import TokenRequestThrottle
from gpuplane.strict_input import StrictQueryParametersMixin, StrictSerializer, StrictStringField
from gpuplane.tokens import APITokenAuthentication


class TokenRequestSerializer(StrictSerializer):
    """The credentials of the user the token will act for."""

    username = StrictStringField(max_length=150, write_only=True)
    password = StrictStringField(max_length=4096, trim_whitespace=False, write_only=True, style={"input_type": "password"})

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        user = authenticate(request=self.context.get("request"), username=attrs["username"], password=attrs["password"])
        if user is None:  # also for an inactive user
            raise serializers.ValidationError("Unable to log in with provided credentials.", code="authorization")
        return {**attrs, "user": user}


class IssuedTokenSerializer(serializers.Serializer):
    """A new token and when it expires."""

    token = serializers.CharField(help_text="Send as `Authorization: Token <token>`. Shown only this once.")
    expiry = serializers.DateTimeField(help_text="When the token stops working.")


class ObtainTokenView(StrictQueryParametersMixin, APIView):
    """Issue a new API token for a username and password; revoke your own."""

    throttle_classes = [TokenRequestThrottle]
    renderer_classes = [JSONRenderer]
    query_parameters = ("all",)

    def get_authenticators(self) -> list[Any]:
        # POST: the credentials are in the body (a stale Authorization header must not get in the way).
        if self._method() == "POST":
            return []
        return [APITokenAuthentication(), SessionAuthentication()]

    def get_permissions(self) -> list[Any]:
        return [AllowAny()] if self._method() == "POST" else [IsAuthenticated()]

    def _method(self) -> str | None:
        # The schema generator may ask before a request exists.
        return getattr(getattr(self, "request", None), "method", None)

    @extend_schema(
        operation_id="auth_token_create",
        tags=["auth"],
        request=TokenRequestSerializer,
        responses={
            200: IssuedTokenSerializer,
            400: OpenApiResponse(description="Wrong credentials, or messages per field."),
            429: OpenApiResponse(description="Too many token requests from this address; see Retry-After."),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = TokenRequestSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        token, key = AuthToken.objects.create(user=serializer.validated_data["user"])
        record_token_created(token, request._request)
        return Response(IssuedTokenSerializer({"token": key, "expiry": token.expiry}).data)

    @extend_schema(
        operation_id="auth_token_destroy",
        tags=["auth"],
        request=None,
        parameters=[OpenApiParameter(
            "all", OpenApiTypes.STR, enum=["true"], required=False,
            description="`true`: revoke every token of yours, not only the one that authenticates this request.",
        )],
        responses={
            204: OpenApiResponse(description="Revoked: the token (or all of yours) no longer works."),
            400: OpenApiResponse(description="No token to revoke: this request is not authenticated by one "
                                             "(a session) and does not ask for `all`."),
            401: OpenApiResponse(description="No valid credentials."),
        },
    )
    def delete(self, request: Request) -> Response:
        everything = request.query_params.get("all")
        if everything not in (None, "true"):
            raise exceptions.ValidationError({"all": ["Write all=true, or leave it out to revoke this token only."]})
        if everything:
            tokens = AuthToken.objects.filter(user=request.user).select_related("user")
        elif isinstance(request.auth, AuthToken):
            tokens = AuthToken.objects.filter(digest=request.auth.digest).select_related("user")
        else:
            raise exceptions.ValidationError({"detail": "This request carries no API token: send the token to revoke "
                                                        "(Authorization: Token <key>), or all=true."})
        revoke_tokens(tokens, reason="revoked by its owner", actor=request.user)
        return Response(status=204)
