"""Run the `gpuplane` CLI as a user does: a separate process with its own config file, nothing of
the test process but the source tree on its path (the command imports no server module)."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60


@dataclass(frozen=True)
class CLIUser:
    """One person at a terminal: their config file (and so their token)."""

    config: Path
    cwd: Path

    def env(self, **extra: str) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
        return {**keep, "PYTHONPATH": str(REPO), "GPUPLANE_CONFIG": str(self.config), **extra}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "gpuplane_cli", *args]

    def run(self, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.command(*args), cwd=self.cwd, env=self.env(**env), input=stdin, text=True,
                              capture_output=True, timeout=TIMEOUT_S, check=False)

    def ok(self, *args: str, stdin: str | None = None, **env: str) -> str:
        """stdout of a command that must succeed (its stderr in the failure message)."""
        done = self.run(*args, stdin=stdin, **env)
        assert done.returncode == 0, f"gpuplane {' '.join(args)} -> {done.returncode}\n{done.stderr}{done.stdout}"
        return done.stdout

    def fails(self, *args: str, **env: str) -> str:
        """stderr of a command that must fail with exit 1 and print nothing on stdout."""
        done = self.run(*args, **env)
        assert done.returncode == 1, f"gpuplane {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}"
        assert done.stdout == ""
        return done.stderr

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*args), cwd=self.cwd, env=self.env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
