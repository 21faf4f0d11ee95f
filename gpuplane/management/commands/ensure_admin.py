"""`manage.py ensure_admin`: make sure a new user can log in, and tell them how.

`make run` calls this on every start. The first time (no superuser in the database) it creates
one with a random password, prints it, and saves the login to var/admin-password.txt (mode
0600). Later runs print the user name and where the password is saved, never the password: a
terminal's scrollback or a CI log should not collect it on every start. A superuser made any
other way (`createsuperuser`, with or without DJANGO_SUPERUSER_* variables) is respected:
nothing is created, and its name is shown.
It also makes sure the role groups (viewer, operator, admin) exist, so the admin can hand
them out in the Django admin right away.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gpuplane.roles import ROLE_ORDER

DEFAULT_LOGIN_URL = "http://127.0.0.1:8000/accounts/login/"


@dataclass(frozen=True)
class SavedLogin:
    username: str
    password: str


def admin_password_path() -> Path:
    """Where the generated development login is kept: <GPUPLANE_VAR_DIR>/admin-password.txt."""
    return Path(settings.VAR_DIR) / "admin-password.txt"


def read_saved_login(path: Path) -> SavedLogin | None:
    """The login stored at `path`, or None when the file is missing or lacks either field."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            fields[key.strip()] = value.strip()
    if not fields.get("username") or not fields.get("password"):
        return None
    return SavedLogin(fields["username"], fields["password"])


def write_saved_login(path: Path, login: SavedLogin) -> None:
    """Store `login` at `path`, readable by the owner only (0600), replacing any old file.

    Written to a temporary file first, so a crash never leaves a half-written password.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".admin-password-")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(
                "# gpuplane development login, written by `manage.py ensure_admin`.\n"
                f"username: {login.username}\n"
                f"password: {login.password}\n"
            )
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def format_login(url: str, login: SavedLogin, path: Path) -> str:
    """The few lines a person needs to log in, password included: only for a new account."""
    return (
        f"Log in at {url}\n"
        f"    username: {login.username}\n"
        f"    password: {login.password}\n"
        f"(saved in {path}; change it with `python manage.py changepassword {login.username}`)"
    )


def format_saved_login(url: str, login: SavedLogin, path: Path) -> str:
    """Where to find the login of an account made earlier, without the password itself."""
    return (
        f"Log in at {url}\n"
        f"    username: {login.username}\n"
        f"    password: saved in {path} (readable by you only: `cat {path}`)\n"
        f"(forgot it or lost the file? `python manage.py changepassword {login.username}`)"
    )


def valid_saved_login(path: Path) -> SavedLogin | None:
    """The saved login if it still opens an active superuser account, else None."""
    login = read_saved_login(path)
    if login is None:
        return None
    user = get_user_model().objects.filter(username=login.username, is_active=True, is_superuser=True).first()
    if user is None or not user.check_password(login.password):
        return None
    return login


class Command(BaseCommand):
    help = "Create a first admin (superuser) with a random password if none exists; print how to log in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="name of the account to create (default: admin)")
        parser.add_argument("--email", default="admin@localhost", help="its e-mail address")
        parser.add_argument("--url", default=DEFAULT_LOGIN_URL, help="login page URL to print")

    def handle(self, *args: Any, username: str, email: str, url: str, **options: Any) -> None:
        for role in ROLE_ORDER:
            Group.objects.get_or_create(name=role)
        path = admin_password_path()
        users = get_user_model().objects
        superusers = list(users.filter(is_superuser=True, is_active=True).values_list("username", flat=True))
        if superusers:
            login = valid_saved_login(path)
            if login is not None:
                self.stdout.write(format_saved_login(url, login, path))
            else:
                # Made with createsuperuser, or the password was changed: we do not know it.
                names = ", ".join(sorted(superusers))
                self.stdout.write(
                    f"Log in at {url} as an existing admin: {names}\n"
                    f"(forgot the password? `python manage.py changepassword {sorted(superusers)[0]}`)"
                )
            return

        if users.filter(username=username).exists():
            raise CommandError(
                f"User {username!r} exists but is not an active superuser; make one with "
                "`python manage.py createsuperuser` or pass --username NAME."
            )
        login = SavedLogin(username=username, password=secrets.token_urlsafe(12))
        # File first: if it cannot be written we stop before making an account nobody can open.
        write_saved_login(path, login)
        users.create_superuser(username=username, email=email, password=login.password)
        self.stdout.write(self.style.SUCCESS(f"Created admin account {username!r}."))
        self.stdout.write(format_login(url, login, path))
