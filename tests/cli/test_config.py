"""The config file (gpuplane_cli.config): where it is, 0600 whatever the umask, replaced whole,
and flags over environment over file."""
from __future__ import annotations

import os
import stat

import pytest

from gpuplane_cli import config
from gpuplane_cli.errors import CLIError


def test_where_the_file_is():
    assert config.config_path({"GPUPLANE_CONFIG": "/etc/gp.yaml", "XDG_CONFIG_HOME": "/x"}).as_posix() == "/etc/gp.yaml"
    assert config.config_path({"XDG_CONFIG_HOME": "/x"}).as_posix() == "/x/gpuplane/config"
    assert config.config_path({}).as_posix().endswith("/.config/gpuplane/config")


def test_the_file_is_only_its_owners_whatever_the_umask(tmp_path):
    path = tmp_path / "deep" / "config"
    old = os.umask(0)  # a umask that would leave a new file world-readable
    try:
        config.save(path, config.Config(server="https://gp.example", token="s3cret", username="otto"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert config.load(path) == config.Config(server="https://gp.example", token="s3cret", username="otto")
    # Replaced in one rename: no temporary file left beside it, the new content whole.
    config.save(path, config.Config(server="https://gp.example", token="other"))
    assert [p.name for p in path.parent.iterdir()] == ["config"]
    assert config.load(path).token == "other" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_forgetting_the_token_keeps_the_server(tmp_path):
    path = tmp_path / "config"
    config.save(path, config.Config(server="https://gp.example", token="t", expiry="2027-01-01T00:00:00Z"))
    assert config.forget_token(path) is True
    assert config.load(path) == config.Config(server="https://gp.example")
    assert config.forget_token(path) is False


def test_a_missing_file_is_empty_and_a_broken_one_an_error(tmp_path):
    assert config.load(tmp_path / "absent") == config.Config()
    broken = tmp_path / "broken"
    broken.write_text("server: [unclosed\n")
    with pytest.raises(CLIError, match="is not valid YAML"):
        config.load(broken)
    broken.write_text("- a list\n")
    with pytest.raises(CLIError, match="must hold a mapping"):
        config.load(broken)


def test_flags_over_environment_over_file():
    saved = config.Config(server="https://file.example/", token="from-file")
    environ = {"GPUPLANE_SERVER": "https://env.example", "GPUPLANE_TOKEN": "from-env"}
    assert config.resolve(server_flag=None, token_flag=None, insecure_flag=False, environ={}, config=saved) == \
        config.Connection("https://file.example", "from-file")
    assert config.resolve(server_flag=None, token_flag=None, insecure_flag=False, environ=environ, config=saved) == \
        config.Connection("https://env.example", "from-env")
    assert config.resolve(server_flag="gp.local:8443", token_flag="from-flag", insecure_flag=True, environ=environ,
                          config=saved) == config.Connection("https://gp.local:8443", "from-flag", True)
