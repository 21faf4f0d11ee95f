"""var/ holds secrets (the secret key, admin-password.txt, the SQLite database with its tokens):
owner-only, files 0600 and directories 0700, whoever creates them.

Most of var/ is created by libraries (SQLite, kombu's filesystem broker, Celery beat's shelve,
the cache), which create files with the process umask; so every process that loads the
settings (web, worker, beat, manage.py) runs with umask 077. Files made before this existed
are tightened on start.
"""
from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

OWNER_ONLY_UMASK = 0o077
FILE_MODE = 0o600
DIR_MODE = 0o700


def secure_var_dir(var_dir: Path) -> None:
    """Create `var_dir` 0700 and make everything this process creates from now on owner-only.

    Existing entries directly inside it (and inside its subdirectories one level down: the broker's
    queue folders) lose group and other permissions; deeper files were created under this umask.
    """
    os.umask(OWNER_ONLY_UMASK)
    var_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _restrict(var_dir)
    for entry in var_dir.iterdir():
        _restrict(entry)
        if entry.is_dir() and not entry.is_symlink():
            for child in entry.iterdir():
                _restrict(child)


def _restrict(path: Path) -> None:
    """Drop group/other bits (0600 for a file, 0700 for a directory); a symlink is left alone."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:  # removed meanwhile by another process
        return
    if stat.S_ISLNK(mode) or not stat.S_IMODE(mode) & 0o077:
        return
    try:
        path.chmod(DIR_MODE if stat.S_ISDIR(mode) else stat.S_IMODE(mode) & FILE_MODE)
    except (FileNotFoundError, PermissionError):  # another user's file: not ours to change
        pass


def persistent_secret_key(path: Path) -> str:
    """The secret key kept at `path` (mode 0600), generated on first use and reused afterwards.

    Web, worker and beat start at once: the key is written to a temporary file and linked into
    place, so exactly one generated key wins and nobody reads a half-written one.
    """
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".secret-key-")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as tmp:
            tmp.write(secrets.token_urlsafe(50) + "\n")
        try:
            os.link(tmp_name, path)
        except FileExistsError:  # another process won the race: use its key
            pass
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> str:
    key = path.read_text(encoding="ascii").strip()
    if len(key) < 50:
        raise ImproperlyConfigured(f"{path} holds no usable secret key: delete it and a new one will be generated")
    return key
