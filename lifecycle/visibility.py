"""Who may read which audit events: admins every one; other roles the cluster's and their own.

Account events (sign-ins, tokens, role changes: gpuplane/accounts.py) are about a person. A
non-admin reads those they caused (`actor` is their username) or that concern their own account
(a failed sign-in under their name, say), never another user's. Every other event is about the
cluster and readable by every role. The Activity page and `/api/v1/audit-events/` both use this.
"""
from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from gpuplane.roles import ADMIN, has_role
from lifecycle.models import AuditEvent

USER_OBJECT_TYPE = "auth.user"
TOKEN_OBJECT_TYPE = "knox.authtoken"
ACCOUNT_OBJECT_TYPES = (USER_OBJECT_TYPE, TOKEN_OBJECT_TYPE)


def visible_events(queryset: QuerySet[AuditEvent], user: Any) -> QuerySet[AuditEvent]:
    """`queryset` narrowed to what `user` may read (nothing for a user who is not signed in)."""
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if has_role(user, ADMIN):
        return queryset
    own = Q(actor=user.get_username()) | Q(object_type=USER_OBJECT_TYPE, object_id=str(user.pk))
    return queryset.filter(~Q(object_type__in=ACCOUNT_OBJECT_TYPES) | own)
