"""The viewer / operator / admin role model.

Roles are Django groups named after them; a superuser is an admin. Each role includes the
ones below it: admin > operator > viewer. An authenticated user in no group has no access.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework.permissions import SAFE_METHODS, BasePermission

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLE_ORDER = (VIEWER, OPERATOR, ADMIN)


def role_of(user: Any) -> str | None:
    """The highest role a user holds, or None."""
    if not user or not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for role in reversed(ROLE_ORDER):
        if role in names:
            return role
    return None


def has_role(user: Any, role: str) -> bool:
    held = role_of(user)
    return held is not None and ROLE_ORDER.index(held) >= ROLE_ORDER.index(role)


class RolePermission(BasePermission):
    """Reads need `viewer`; writes need the view's `write_role` (default `operator`)."""

    message = "Your role does not allow this."

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        if request.method in SAFE_METHODS:
            return has_role(request.user, VIEWER)
        return has_role(request.user, getattr(view, "write_role", OPERATOR))


def role_context(request: HttpRequest) -> dict[str, Any]:
    return {"user_role": role_of(getattr(request, "user", None))}
