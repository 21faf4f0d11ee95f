"""How a node's telemetry agent proves which node it speaks for: two `Authorization: Bearer` credentials.

1. Its projected ServiceAccount token (`ServiceAccountTokenAuthentication`): the default in a
   cluster, no manual step. Kubernetes says which node it is bound to (`nodes.agent_identity`).
2. A node agent key (`NodeAgentTokenAuthentication`), the fallback (`make run`, clusters older
   than Kubernetes 1.30): made by `manage.py create_agent_token NODE`, shown once, stored only as
   its SHA-256 digest (`NodeAgentToken`).

A ServiceAccount token is a JWT (two dots); a key has no dot, which tells them apart. (User API
tokens keep DRF's `Authorization: Token <key>`; the keywords never collide.) Either authenticates
the request as a `NodeAgent` principal: authenticated, but holding no role, so
gpuplane.roles.RolePermission refuses it everywhere (403). Only the telemetry and GPU report
endpoints admit it, and only for its own node (403 for another). A key that is unknown or revoked,
or a token the cluster does not vouch for as the agent's, is a 401.
"""
from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from nodes.agent_identity import AgentIdentity, NotAnAgent, identify_agent, looks_like_jwt
from nodes.cluster.base import ClusterError

if TYPE_CHECKING:
    from nodes.models import Node, NodeAgentToken

KEYWORD = "Bearer"
KEY_BYTES = 32  # secrets.token_urlsafe(32): 43 characters, 256 bits
PREFIX_CHARS = 8
# last_used_at is a hint for humans ("is this agent alive?"), not an audit log (GPU.sampled_at
# says to the second when a node last reported): writing it on every one of thousands of posts
# per minute would double the telemetry endpoint's writes; once per 5 minutes per agent is a
# tenth of its posts.
LAST_USED_RESOLUTION = timedelta(minutes=5)


def digest_key(key: str) -> str:
    """The SHA-256 hex digest stored for an agent key."""
    return hashlib.sha256(key.encode()).hexdigest()


def issue_agent_token(node: Node) -> tuple[NodeAgentToken, str]:
    """Create a token for `node`; return it and its key. The key is not stored and cannot be shown again."""
    from nodes.models import NodeAgentToken

    key = secrets.token_urlsafe(KEY_BYTES)
    token = NodeAgentToken.objects.create(node=node, key_digest=digest_key(key), prefix=key[:PREFIX_CHARS])
    return token, key


class NodeAgent:
    """Who a request made with an agent credential is: authenticated, tied to one node, no role.

    `node` is the inventory's row of `node_name`, None when the inventory has no such node yet
    (a ServiceAccount token names a node Kubernetes knows; the endpoint then answers as for an
    unknown node).

    Shaped like django.contrib.auth's AnonymousUser (empty groups and permissions) so that code
    asking a user for its role or permissions gets "none", except that it is authenticated.
    """

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, node_name: str, node: Node | None = None) -> None:
        self.node_name = node_name
        self.node = node
        self.username = f"agent:{node_name}"

    def __str__(self) -> str:
        return self.username

    def get_username(self) -> str:
        return self.username

    @property
    def groups(self) -> Any:
        from django.contrib.auth.models import Group
        from django.db.models.manager import EmptyManager

        return EmptyManager(Group)

    @property
    def user_permissions(self) -> Any:
        from django.contrib.auth.models import Permission
        from django.db.models.manager import EmptyManager

        return EmptyManager(Permission)

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False

    def has_perms(self, perm_list: Any, obj: Any = None) -> bool:
        return False

    def has_module_perms(self, app_label: str) -> bool:
        return False


def _bearer_key(request: Request) -> str | None:
    """The value of `Authorization: Bearer <value>`; None for another scheme; 401 when malformed."""
    parts = get_authorization_header(request).split()
    if not parts or parts[0].lower() != KEYWORD.lower().encode():
        return None
    if len(parts) != 2:
        raise exceptions.AuthenticationFailed("Invalid Bearer header: expected 'Bearer <agent key>'.")
    try:
        return parts[1].decode("ascii")
    except UnicodeError as exc:
        raise exceptions.AuthenticationFailed("Invalid Bearer header: the key must be ASCII.") from exc


def find_token(digest: str) -> NodeAgentToken | None:
    """The token with this key digest, its node attached (only `id` and `name` loaded; the other
    fields load when read), or None; one query.

    Plain SQL rather than the ORM: every agent post authenticates, and compiling the ORM's
    query cost twenty times more CPU than running it (bench/ingest.py).
    """
    from django.db import connection

    from nodes.models import Node, NodeAgentToken

    with connection.cursor() as cursor:
        cursor.execute(_find_token_statement(connection.vendor), [digest])
        row = cursor.fetchone()
    if row is None:
        return None
    token_id, node_id, prefix, last_used_at, revoked, node_name = row
    if last_used_at is not None and connection.vendor == "sqlite":  # naive (or text) there: made aware
        last_used_at = connection.ops.convert_datetimefield_value(last_used_at, None, connection)
    token = NodeAgentToken.from_db(
        connection.alias, _TOKEN_COLUMNS, (token_id, node_id, prefix, last_used_at, bool(revoked))
    )
    token.key_digest = digest
    token.node = Node.from_db(connection.alias, ["id", "name"], (node_id, node_name))
    return token


_TOKEN_COLUMNS = ["id", "node_id", "prefix", "last_used_at", "revoked"]


@functools.cache
def _find_token_statement(vendor: str) -> str:
    """`find_token`'s SELECT on this database: built once per process, not per agent post."""
    from django.db import connection

    from nodes.models import Node, NodeAgentToken

    token_meta, node_meta = NodeAgentToken._meta, Node._meta
    quote = connection.ops.quote_name
    return (
        f"SELECT {', '.join('t.' + quote(token_meta.get_field(name).column) for name in _TOKEN_COLUMNS)}, "
        f"n.{quote('name')} "
        f"FROM {quote(token_meta.db_table)} t JOIN {quote(node_meta.db_table)} n "
        f"ON n.{quote(node_meta.pk.column)} = t.{quote(token_meta.get_field('node').column)} "
        f"WHERE t.{quote(token_meta.get_field('key_digest').column)} = %s"
    )


class NodeAgentTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <key>` with a node agent key -> (NodeAgent, NodeAgentToken).

    Returns None (not this scheme) for any other header, so it sits beside DRF's token and
    session authentication. A malformed header, an unknown key or a revoked token: 401.
    """

    def authenticate(self, request: Request) -> tuple[NodeAgent, NodeAgentToken] | None:
        from nodes.models import NodeAgentToken

        key = _bearer_key(request)
        if key is None:
            return None
        token = find_token(digest_key(key))
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid agent token.")
        if token.revoked:
            raise exceptions.AuthenticationFailed("This agent token has been revoked.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
            NodeAgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return NodeAgent(token.node.name, token.node), token

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="gpuplane-agent"'


def find_node(name: str) -> Node | None:
    """The inventory's node `name` (only `id` and `name` loaded), or None; one query, in plain SQL
    for the reason `find_token` gives."""
    from django.db import connection

    from nodes.models import Node

    meta, quote = Node._meta, connection.ops.quote_name
    sql = (f"SELECT {quote(meta.pk.column)} FROM {quote(meta.db_table)} "
           f"WHERE {quote(meta.get_field('name').column)} = %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [name])
        row = cursor.fetchone()
    return None if row is None else Node.from_db(connection.alias, ["id", "name"], (row[0], name))


class ReviewUnavailable(exceptions.APIException):
    """The cluster could not be asked about a token: 503, which an agent sends again later."""

    status_code = 503
    default_detail = "The agent's token cannot be checked with the cluster now."
    default_code = "review_unavailable"


class ServiceAccountTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <projected ServiceAccount token>` -> (NodeAgent, AgentIdentity).

    Returns None for any other header and for a bearer value that is not a JWT (an agent key:
    NodeAgentTokenAuthentication's), so it goes first on the endpoints agents post to. A token
    the cluster does not vouch for as the agent's of some node (`nodes.agent_identity`): 401.
    The cluster unreachable: 503.
    """

    def authenticate(self, request: Request) -> tuple[NodeAgent, AgentIdentity] | None:
        key = _bearer_key(request)
        if key is None or not looks_like_jwt(key):
            return None
        try:
            identity = identify_agent(key)
        except NotAnAgent as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        except ClusterError as exc:
            raise ReviewUnavailable(f"The agent's token cannot be checked with the cluster now: {exc}") from None
        return NodeAgent(identity.node_name, find_node(identity.node_name)), identity

    def authenticate_header(self, request: Request) -> str:
        return f'{KEYWORD} realm="gpuplane-agent"'


class ServiceAccountTokenScheme(OpenApiAuthenticationExtension):
    """Documents the agents' ServiceAccount tokens, on the operations that accept them only."""

    target_class = "nodes.authentication.ServiceAccountTokenAuthentication"
    name = "agentServiceAccountAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": (
                "The node agent's projected ServiceAccount token (audience `gpuplane`, bound to its pod), "
                "checked by the cluster's TokenReview API; its node's telemetry and GPU report only."
            ),
        }



class NodeAgentTokenScheme(OpenApiAuthenticationExtension):
    """Documents agent tokens in the OpenAPI schema, on the operations that accept them only.

    The class is among the default authenticators (so that an agent key is recognised, and
    refused, everywhere), but only views with `accepts_agent_tokens = True` list it as a way in.
    """

    target_class = "nodes.authentication.NodeAgentTokenAuthentication"
    name = "agentTokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Node agent key from `manage.py create_agent_token NODE`; telemetry for that node only.",
        }

    def get_security_requirement(self, auto_schema: Any) -> dict[str, list[Any]] | list[dict[str, list[Any]]]:
        if getattr(auto_schema.view, "accepts_agent_tokens", False):
            return {self.name: []}
        return []  # no requirement: only the telemetry endpoint accepts agent keys
