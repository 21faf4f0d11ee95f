"""The web server's address: how to bind it, how to show it, and whether it is free.

Used by `manage.py run_gpuplane`, and by its `--check-port`, which `make run` calls first so that
a busy port is reported before anything else is printed (the admin login above all).
"""
from __future__ import annotations

import errno
import socket


def bind_address(host: str, port: int) -> str:
    """`host:port` as gunicorn wants it; IPv6 literals go in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def public_url(host: str, port: int, path: str = "/") -> str:
    """The URL a person should open; a wildcard bind address is shown as loopback."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}{path}"


def port_in_use(host: str, port: int) -> bool:
    """Whether another socket listens on host:port; other bind errors are raised (OSError)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Same option gunicorn sets, so a socket in TIME_WAIT from the last run does not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def accepts_connections(host: str, port: int) -> bool:
    connect_host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    try:
        with socket.create_connection((connect_host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _another_port(port: int) -> int:
    """A port to suggest instead: the next one, or 8000 outside the unprivileged range."""
    return port + 1 if 1024 <= port < 65535 else 8000


def port_problem(host: str, port: int) -> str | None:
    """Why the web server could not listen on host:port, in words with the way out; None if it can."""
    address = bind_address(host, port)
    if not 1 <= port <= 65535:
        return f"port {port} is not a TCP port (1 to 65535); choose one, e.g. `make run PORT={_another_port(port)}`"
    try:
        busy = port_in_use(host, port)
    except (OSError, UnicodeError) as exc:  # unknown host name, address not on this machine, port < 1024
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return (
            f"cannot listen on {address}: {reason}. Choose another address or port, "
            f"e.g. `make run HOST=127.0.0.1 PORT={_another_port(port)}`"
        )
    if busy:
        return (
            f"port {port} is already in use on {host} (is gpuplane already running?). Stop what listens "
            f"there, or choose another port: `make run PORT={_another_port(port)}`"
        )
    return None
