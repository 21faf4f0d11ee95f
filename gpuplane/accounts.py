"""Account events: sign-ins, roles and API tokens, as audit events; revoking tokens when they must go.

- A sign-in (`user.signed-in`), a failed one (`user.sign-in-failed`, with why: wrong password, no
  such user, inactive account; also counted against the account's budget, gpuplane.ratelimits)
  and a sign-out (`user.signed-out`), from Django's auth signals, so the sign-in pages, the admin
  login and the token endpoint (which calls `authenticate`) are all covered.
- A change of role (`user.role-changed`, before/after): a role group added or removed either
  way round, or the superuser flag.
- A password change (`user.password-changed`) or deactivation (`user.deactivated`) revokes the
  user's API tokens (`token.revoked`, one event each), in the transaction that saves the user.
- `record_token_created` / `revoke_tokens` for the token endpoint (`token.created`, `token.revoked`).

The actor is the user of the request being served (`ActorMiddleware` keeps the request, and
DRF's token user is read when the event is recorded), else "system" (a management command).
Connected in gpuplane.apps.GpuplaneConfig.ready.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import m2m_changed, post_save, pre_save
from django.http import HttpRequest, HttpResponse
from knox.models import AuthToken

from gpuplane.ratelimits import client_address, count_failed_sign_in
from gpuplane.roles import ROLE_ORDER, role_of
from lifecycle.audit import AuditEntry, record, record_many
from lifecycle.visibility import TOKEN_OBJECT_TYPE as TOKEN_TYPE
from lifecycle.visibility import USER_OBJECT_TYPE as USER_TYPE

_request: ContextVar[HttpRequest | None] = ContextVar("gpuplane_account_request", default=None)


class ActorMiddleware:
    """Keeps the request being served, so that account events name who made the change."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def current_actor() -> Any:
    """The signed-in user of the request being served (DRF sets a token's user on it), else None."""
    request = _request.get()
    user = getattr(request, "user", None)
    return user if getattr(user, "is_authenticated", False) else None


def _origin(request: HttpRequest | None) -> str:
    if request is None:
        return ""
    return f" (from {client_address(request)}, {request.path})"


# ---- sign-ins ----------------------------------------------------------------------------------


def _signed_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    record("user.signed-in", user, actor=user, reason="signed in" + _origin(request))


def _signed_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is not None:
        record("user.signed-out", user, actor=user, reason="signed out" + _origin(request))


def _sign_in_failed(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any) -> None:
    username = str(credentials.get(get_user_model().USERNAME_FIELD) or credentials.get("username") or "")
    count_failed_sign_in(username)
    user = get_user_model()._default_manager.filter(username=username).first() if username else None
    if user is None:
        why = "no such user"
    elif not user.is_active:
        why = "account inactive"
    else:
        why = "wrong password"
    record("user.sign-in-failed", (USER_TYPE, user.pk if user else ""), actor="anonymous",
           object_repr=username, reason=why + _origin(request))


# ---- tokens ------------------------------------------------------------------------------------


def _token_repr(token: AuthToken) -> str:
    return f"API token {token.token_key}… of {token.user.get_username()}"


def record_token_created(token: AuthToken, request: HttpRequest | None) -> None:
    record("token.created", (TOKEN_TYPE, token.token_key), actor=token.user, object_repr=_token_repr(token),
           reason="issued for a username and password" + _origin(request),
           after={"expiry": token.expiry.isoformat() if token.expiry else None})


def revoke_tokens(tokens: Iterable[AuthToken], *, reason: str, actor: Any) -> int:
    """Delete these tokens (they stop working at once) with a `token.revoked` event each; how many."""
    tokens = list(tokens)
    if not tokens:
        return 0
    record_many(AuditEntry("token.revoked", (TOKEN_TYPE, token.token_key), actor=actor, reason=reason,
                           object_repr=_token_repr(token)) for token in tokens)
    AuthToken.objects.filter(digest__in=[token.digest for token in tokens]).delete()
    return len(tokens)


# ---- changes to a user -------------------------------------------------------------------------


def _before_user_saved(sender: Any, instance: Any, raw: bool = False, update_fields: Any = None, **kwargs: Any) -> None:
    if raw or instance.pk is None or (update_fields is not None and set(update_fields) == {"last_login"}):
        return
    before = sender._default_manager.filter(pk=instance.pk).values("is_active", "is_superuser", "password").first()
    if before is None:
        return
    # set_password() keeps the raw password until the save; a hash upgrade on sign-in clears it
    # first (the password did not change), so only a real change is taken for one.
    changed_password = getattr(instance, "_password", None) is not None or (
        before["password"] != instance.password and not instance.has_usable_password()
    )
    instance._gpuplane_account_before = {**before, "changed_password": changed_password}


def _user_saved(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    before = instance.__dict__.pop("_gpuplane_account_before", None)
    if created or before is None:
        return
    actor = current_actor()
    tokens = AuthToken.objects.filter(user=instance).select_related("user")
    if before["is_active"] and not instance.is_active:
        record("user.deactivated", instance, actor=actor, before={"is_active": True}, after={"is_active": False})
        revoke_tokens(tokens, reason="its user was deactivated", actor=actor)
    elif before["changed_password"]:
        record("user.password-changed", instance, actor=actor, reason="password changed")
        revoke_tokens(tokens, reason="its user's password changed", actor=actor)
    elif not before["is_active"] and instance.is_active:
        record("user.activated", instance, actor=actor, before={"is_active": False}, after={"is_active": True})
    if before["is_superuser"] != instance.is_superuser:
        _record_role_change(instance, role_of(_with_superuser(instance, before["is_superuser"])), role_of(instance),
                            "superuser " + ("granted" if instance.is_superuser else "withdrawn"))


class _with_superuser:
    """A view of `user` with another superuser flag, to ask role_of what the role was."""

    def __init__(self, user: Any, is_superuser: bool) -> None:
        self._user, self.is_superuser = user, is_superuser

    def __getattr__(self, name: str) -> Any:
        return getattr(self._user, name)


def _record_role_change(user: Any, before: str | None, after: str | None, why: str) -> None:
    if before != after:
        record("user.role-changed", user, actor=current_actor(), reason=why,
               before={"role": before or "none"}, after={"role": after or "none"})


def _role_groups(pk_set: Iterable[Any] | None) -> bool:
    return pk_set is None or Group.objects.filter(pk__in=pk_set, name__in=ROLE_ORDER).exists()


def _groups_changed(sender: Any, instance: Any, action: str, reverse: bool, model: Any, pk_set: Any, **kwargs: Any) -> None:
    """User.groups changed, from the user's side (`user.groups.add`) or the group's (`group.user_set.add`)."""
    if action.startswith("pre_"):
        if reverse:  # instance is a Group: the users are pk_set, or all of its users for a clear
            if instance.name not in ROLE_ORDER:
                return
            ids = pk_set if pk_set is not None else set(instance.user_set.values_list("pk", flat=True))
            users = list(get_user_model()._default_manager.filter(pk__in=ids))
        elif _role_groups(pk_set):
            users = [instance]
        else:
            return
        instance._gpuplane_roles_before = [(user, role_of(user)) for user in users]
        return
    verb = {"post_add": "added to", "post_remove": "removed from", "post_clear": "removed from"}.get(action)
    if verb is None:
        return
    for user, role in instance.__dict__.pop("_gpuplane_roles_before", []):
        user = type(user)._default_manager.get(pk=user.pk)  # role_of reads groups afresh
        groups = instance.name if reverse else ", ".join(
            Group.objects.filter(pk__in=pk_set or ()).values_list("name", flat=True)) or "every group"
        _record_role_change(user, role, role_of(user), f"{verb} {groups}")


def connect() -> None:
    """Connect the receivers (once, from the app's ready())."""
    user_model = get_user_model()
    user_logged_in.connect(_signed_in, dispatch_uid="gpuplane.accounts.signed_in")
    user_logged_out.connect(_signed_out, dispatch_uid="gpuplane.accounts.signed_out")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="gpuplane.accounts.sign_in_failed")
    pre_save.connect(_before_user_saved, sender=user_model, dispatch_uid="gpuplane.accounts.before_user_saved")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid="gpuplane.accounts.user_saved")
    m2m_changed.connect(_groups_changed, sender=user_model.groups.through, dispatch_uid="gpuplane.accounts.groups")
