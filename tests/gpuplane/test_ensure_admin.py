"""`manage.py ensure_admin`: the first login a new user gets from `make run`."""
from __future__ import annotations

import io
import stat

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command


@pytest.fixture
def var_dir(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    # The real hasher costs ~1 s per check on a busy CI core; what is tested here is not hashing.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return tmp_path


def ensure_admin(*args: str) -> str:
    out = io.StringIO()
    call_command("ensure_admin", *args, stdout=out)
    return out.getvalue()


def saved_password(var_dir) -> str:
    lines = (var_dir / "admin-password.txt").read_text().splitlines()
    return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("password:"))


def test_it_creates_an_admin_with_a_random_password_and_prints_the_login(db, var_dir):
    output = ensure_admin("--url", "http://127.0.0.1:8123/accounts/login/")

    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.is_active
    password = saved_password(var_dir)
    assert len(password) >= 16
    assert admin.check_password(password)
    assert "http://127.0.0.1:8123/accounts/login/" in output
    assert "username: admin" in output
    assert f"password: {password}" in output


def test_it_keeps_the_password_file_private(db, var_dir):
    ensure_admin()

    mode = stat.S_IMODE((var_dir / "admin-password.txt").stat().st_mode)
    assert mode == 0o600


def test_later_runs_say_where_the_password_is_without_printing_it(db, var_dir):
    first = ensure_admin()
    password = saved_password(var_dir)

    second = ensure_admin("--url", "http://127.0.0.1:8123/accounts/login/")

    assert User.objects.filter(is_superuser=True).count() == 1
    assert "Created" in first and "Created" not in second
    assert password in first
    assert password not in second
    assert "http://127.0.0.1:8123/accounts/login/" in second
    assert "username: admin" in second
    assert str(var_dir / "admin-password.txt") in second
    assert "changepassword admin" in second


def test_each_installation_gets_its_own_password(db, var_dir, tmp_path, settings):
    settings.VAR_DIR = tmp_path / "one"
    ensure_admin()
    first = saved_password(tmp_path / "one")
    User.objects.all().delete()
    settings.VAR_DIR = tmp_path / "two"
    ensure_admin()

    assert saved_password(tmp_path / "two") != first


def test_it_respects_an_admin_made_with_createsuperuser(db, var_dir, monkeypatch):
    monkeypatch.setenv("DJANGO_SUPERUSER_USERNAME", "root")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "chosen-by-the-operator")
    monkeypatch.setenv("DJANGO_SUPERUSER_EMAIL", "root@example.com")
    call_command("createsuperuser", interactive=False, stdout=io.StringIO())

    output = ensure_admin()

    assert list(User.objects.values_list("username", flat=True)) == ["root"]
    assert User.objects.get(username="root").check_password("chosen-by-the-operator")
    assert "existing admin: root" in output
    assert not (var_dir / "admin-password.txt").exists()


def test_it_does_not_print_a_password_that_no_longer_works(db, var_dir):
    ensure_admin()
    stale = saved_password(var_dir)
    admin = User.objects.get(username="admin")
    admin.set_password("changed-by-hand-later")
    admin.save()

    output = ensure_admin()

    assert stale not in output
    assert "existing admin: admin" in output
    assert "changepassword admin" in output


def test_it_will_not_take_over_an_ordinary_account(db, var_dir):
    User.objects.create_user(username="admin", password="belongs-to-someone")

    with pytest.raises(CommandError, match="not an active superuser"):
        ensure_admin()

    assert not User.objects.get(username="admin").is_superuser
    assert not (var_dir / "admin-password.txt").exists()


def test_it_creates_the_role_groups_once(db, var_dir):
    ensure_admin()
    ensure_admin()

    assert sorted(Group.objects.values_list("name", flat=True)) == ["admin", "operator", "viewer"]
