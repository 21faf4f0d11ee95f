"""`login`, `logout`, `version`: get a token for a username and password (or keep a given one) in
the config file; revoke it; say which CLI this is."""
from __future__ import annotations

import argparse
import getpass
import sys
from dataclasses import replace
from typing import Any

from gpuplane_cli import __version__, config
from gpuplane_cli.client import Client
from gpuplane_cli.context import Context
from gpuplane_cli.errors import APIError, CLIError, UsageError, from_api_error


def register(subparsers: Any, parents: list[argparse.ArgumentParser]) -> None:
    login = subparsers.add_parser(
        "login", parents=parents, help="log in to a gpuplane server and keep the token in the config file",
        description="Log in with a username and password (POST /api/v1/auth/token/), or keep a token given "
                    "with --token, and store the server and token in the config file (mode 0600).")
    login.add_argument("login_server", nargs="?", metavar="SERVER",
                       help="the server's URL, e.g. https://gpuplane.example.com (default: the one logged in to)")
    login.add_argument("-u", "--username", help="the user to log in as (prompted for when missing)")
    login.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    login.set_defaults(handler=run_login)

    logout = subparsers.add_parser("logout", parents=parents, help="revoke the token and remove it from the config file")
    logout.set_defaults(handler=run_logout)

    version = subparsers.add_parser("version", parents=parents, help="print the CLI's version")
    version.set_defaults(handler=lambda ctx: ctx.print(f"gpuplane-cli {__version__}") or 0)


def run_login(ctx: Context) -> int:
    args = ctx.args
    server = args.login_server or ctx.option("server") or ctx.environ.get(config.SERVER_ENV) or ctx.config.server
    if not server:
        raise UsageError("error: give the server's URL: login SERVER")
    server = config.normalize_server(server)
    insecure = bool(ctx.option("insecure_skip_tls_verify", False))
    client = Client(server, timeout_s=float(ctx.option("request_timeout", 30) or 30), insecure=insecure)
    token = ctx.option("token") or ""
    if token:
        username, expiry = _check_token(client, token)
    else:
        username = args.username or ctx.config.username or _prompt("Username: ")
        password = _password(args.password_stdin)
        try:
            answer = client.request("POST", "auth/token/", body={"username": username, "password": password},
                                    authenticate=False)
        except APIError as error:
            if error.status == 400:
                raise CLIError("error: You must be logged in to the server (Unauthorized)\n"
                               "Unable to log in with the username and password given.") from None
            raise from_api_error(error) from None
        token, expiry = answer["token"], str(answer.get("expiry") or "")
    saved = replace(ctx.config, server=server, token=token, username=username, expiry=expiry,
                    insecure_skip_tls_verify=insecure or ctx.config.insecure_skip_tls_verify)
    config.save(ctx.config_path, saved)
    who = f" as {username}" if username else ""
    until = f" (the token expires {expiry})" if expiry else ""
    ctx.print(f"Logged in to {server}{who}{until}. Config: {ctx.config_path}")
    return 0


def _check_token(client: Client, token: str) -> tuple[str, str]:
    """Try a given token on the API root: 401 means it is no good (nothing saved)."""
    client.token = token
    try:
        client.get("")
    except APIError as error:
        if error.status != 403:  # 403: the token is good, its user holds no role (yet)
            raise from_api_error(error) from None
    return "", ""


def _prompt(label: str) -> str:
    if not sys.stdin.isatty():
        raise UsageError("error: give --username (standard input is not a terminal)")
    return input(label).strip()


def _password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    if not sys.stdin.isatty():
        raise UsageError("error: give --password-stdin to read the password from standard input")
    return getpass.getpass("Password: ")


def run_logout(ctx: Context) -> int:
    """Revoke the token on the server (`DELETE /api/v1/auth/token/`) where it can, then forget it here."""
    connection = ctx.connection()
    revoked = False
    if connection.server and connection.token:
        try:
            ctx.client().delete("auth/token/")
            revoked = True
        except APIError as error:
            if error.status not in (401, 404, 405):  # 405: a server that cannot revoke tokens yet
                raise from_api_error(error) from None
    removed = config.forget_token(ctx.config_path)
    if revoked:
        ctx.print(f"Logged out of {connection.server}: the token is revoked.")
    elif removed:
        ctx.print(f"Removed the token from {ctx.config_path} (the server did not revoke it).")
    else:
        ctx.print("Not logged in.")
    return 0
