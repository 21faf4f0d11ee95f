"""What every command gets: its parsed arguments, the environment, where to write, the clock, and
an API client built from flags, environment and config file (``config.resolve``)."""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from gpuplane_cli import config as config_file
from gpuplane_cli.client import Client
from gpuplane_cli.errors import CLIError
from gpuplane_cli.output import as_list, dump


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Context:
    args: argparse.Namespace
    environ: Mapping[str, str]
    out: TextIO
    err: TextIO
    prog: str = "gpuplane"
    now: Callable[[], datetime] = _utc_now
    sleep: Callable[[float], None] = time.sleep
    _config: config_file.Config | None = field(default=None, repr=False)

    def option(self, name: str, default: Any = None) -> Any:
        """A global flag's value: flags are accepted before and after the command, so absent ones are missing."""
        return getattr(self.args, name, default)

    @property
    def config_path(self) -> Path:
        flag = self.option("config")
        return Path(flag).expanduser() if flag else config_file.config_path(self.environ)

    @property
    def config(self) -> config_file.Config:
        if self._config is None:
            self._config = config_file.load(self.config_path)
        return self._config

    def connection(self) -> config_file.Connection:
        return config_file.resolve(server_flag=self.option("server"), token_flag=self.option("token"),
                              insecure_flag=bool(self.option("insecure_skip_tls_verify", False)),
                              environ=self.environ, config=self.config)

    def client(self, *, need_token: bool = True) -> Client:
        """The API client; a CLIError when no server is known, or (``need_token``) no token."""
        connection = self.connection()
        if not connection.server:
            raise CLIError(f'error: no server: run "{self.prog} login SERVER", or set {config_file.SERVER_ENV} '
                           "or --server")
        if need_token and not connection.token:
            raise CLIError("error: You must be logged in to the server (Unauthorized)\n"
                           f'No token: run "{self.prog} login", or set {config_file.TOKEN_ENV} or --token.')
        return Client(connection.server, connection.token, timeout_s=float(self.option("request_timeout", 30) or 30),
                      insecure=connection.insecure_skip_tls_verify)

    @property
    def output(self) -> str:
        return str(self.option("output") or "table")

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def warn(self, text: str) -> None:
        self.err.write(text + "\n")

    def emit_data(self, data: Any, *, many: bool = False) -> bool:
        """Print ``data`` for `-o json|yaml` and say so; False for the other formats (the caller prints)."""
        if self.output in ("json", "yaml"):
            self.print(dump(as_list(data) if many else data, self.output))
            return True
        return False
