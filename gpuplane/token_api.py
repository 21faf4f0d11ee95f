"""`POST /api/v1/auth/token/`: a new API token for a username and password (see gpuplane/tokens.py).

Answers 200 `{"token": ..., "expiry": ...}`; 400 for wrong credentials or an unknown field; 429
with Retry-After past settings.GPUPLANE_TOKEN_RATE requests per address (gpuplane/ratelimits.py).
"""
from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from knox.models import AuthToken
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from gpuplane.ratelimits import TokenRequestThrottle
from gpuplane.strict_input import StrictQueryParametersMixin, StrictSerializer, StrictStringField


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
    """Issue a new API token for a username and password."""

    authentication_classes: list[type] = []  # the credentials are in the body
    permission_classes = [AllowAny]
    throttle_classes = [TokenRequestThrottle]
    renderer_classes = [JSONRenderer]

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
        return Response(IssuedTokenSerializer({"token": key, "expiry": token.expiry}).data)
