"""Where the CLI keeps its server and token: one YAML file, like kubectl's kubeconfig, that only
its owner may read (0600, written atomically). Flags beat environment variables, which beat the file.

The file is `$GPUPLANE_CONFIG`, else `$XDG_CONFIG_HOME/gpuplane/config`, else
`~/.config/gpuplane/config`. Its keys: `server`, `token`, `username`, `expiry`,
`insecure-skip-tls-verify`.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from gpuplane_cli.errors import CLIError

CONFIG_ENV = "GPUPLANE_CONFIG"
SERVER_ENV = "GPUPLANE_SERVER"
TOKEN_ENV = "GPUPLANE_TOKEN"


@dataclass(frozen=True)
class Config:
    """What the file holds (empty strings when unset)."""

    server: str = ""
    token: str = ""
    username: str = ""
    expiry: str = ""
    insecure_skip_tls_verify: bool = False


def config_path(environ: Mapping[str, str]) -> Path:
    """The config file's path for this environment (see the module docstring)."""
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV]).expanduser()
    base = Path(environ["XDG_CONFIG_HOME"]) if environ.get("XDG_CONFIG_HOME") else Path("~/.config").expanduser()
    return base / "gpuplane" / "config"


def load(path: Path) -> Config:
    """The file's settings; an absent file is an empty Config, an unreadable one a CLIError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise CLIError(f"error: cannot read the config file {path}: {exc.strerror}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CLIError(f"error: the config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise CLIError(f"error: the config file {path} must hold a mapping (server, token, ...)")
    return Config(
        server=str(data.get("server") or ""),
        token=str(data.get("token") or ""),
        username=str(data.get("username") or ""),
        expiry=str(data.get("expiry") or ""),
        insecure_skip_tls_verify=bool(data.get("insecure-skip-tls-verify", False)),
    )


def save(path: Path, config: Config) -> None:
    """Write ``config`` to ``path``, readable and writable by its owner only (0600), replacing the
    old file in one rename so that a crash leaves the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data: dict[str, object] = {"server": config.server, "token": config.token}
    if config.username:
        data["username"] = config.username
    if config.expiry:
        data["expiry"] = config.expiry
    if config.insecure_skip_tls_verify:
        data["insecure-skip-tls-verify"] = True
    # mkstemp creates the file 0600 whatever the umask, so the token is never readable by others.
    fd, temporary = tempfile.mkstemp(prefix=".config-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yaml.safe_dump(data, handle, sort_keys=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def forget_token(path: Path) -> bool:
    """Remove the token from the file (keeping the server); False when there was none."""
    config = load(path)
    if not config.token:
        return False
    save(path, replace(config, token="", expiry=""))
    return True


@dataclass(frozen=True)
class Connection:
    """The server and token one command uses, after flags, environment and file."""

    server: str
    token: str
    insecure_skip_tls_verify: bool = False


def resolve(*, server_flag: str | None, token_flag: str | None, insecure_flag: bool, environ: Mapping[str, str],
            config: Config) -> Connection:
    """Flags over `GPUPLANE_SERVER` / `GPUPLANE_TOKEN` over the config file. The server URL loses
    a trailing slash; a server given without a scheme is taken as https, as kubectl does."""
    server = server_flag or environ.get(SERVER_ENV) or config.server
    token = token_flag or environ.get(TOKEN_ENV) or config.token
    return Connection(server=normalize_server(server) if server else "", token=token,
                      insecure_skip_tls_verify=insecure_flag or config.insecure_skip_tls_verify)


def normalize_server(server: str) -> str:
    """``"gpuplane.example.com/"`` -> ``"https://gpuplane.example.com"``."""
    server = server.strip().rstrip("/")
    if "://" not in server:
        server = "https://" + server
    return server
