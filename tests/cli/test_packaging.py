"""`pip install .` installs the CLI alone: a wheel of the gpuplane_cli package with the `gpuplane`
and `kubectl-gpuplane` executables and PyYAML as its one dependency, built by pip from the
repository root as a user builds it (pyproject.toml, flit_core fetched by pip's build isolation)."""
from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.cli.running import REPO


def pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_pip_install_dot_installs_the_cli_alone_with_both_executables(tmp_path):
    pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(REPO))
    [wheel] = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    packaged = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packaged == {"gpuplane_cli"}  # not the server's packages
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "gpuplane_cli").rglob("*.py")}
    assert sources <= set(names)  # every module of the CLI, commands included
    assert [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")] == ["Requires-Dist: PyYAML>=6"]
    scripts = configparser.ConfigParser()
    scripts.read_string(entry_points)
    assert dict(scripts["console_scripts"]) == {"gpuplane": "gpuplane_cli.main:main",
                                                "kubectl-gpuplane": "gpuplane_cli.main:main"}

    # Installed, each executable runs; kubectl's plugin names itself as kubectl shows it.
    target = tmp_path / "site"
    pip("install", "--no-deps", "--no-index", "--quiet", "--target", str(target), str(wheel))
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    version = subprocess.run([str(target / "bin" / "gpuplane"), "version"], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=60, check=False)
    assert (version.returncode, version.stdout.split()[0]) == (0, "gpuplane-cli"), version.stderr
    plugin = subprocess.run([str(target / "bin" / "kubectl-gpuplane"), "--help"], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60, check=False)
    assert plugin.returncode == 0 and plugin.stdout.startswith("usage: kubectl gpuplane "), plugin.stderr
    assert Path(target / "gpuplane_cli" / "main.py").exists() and not (target / "scheduler").exists()
