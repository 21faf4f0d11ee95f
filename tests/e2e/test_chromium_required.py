"""In CI a missing Chromium fails the run; elsewhere the browser tests skip with a reason."""
from __future__ import annotations

import pytest

from tests.e2e.conftest import require_chromium


def test_a_missing_chromium_fails_in_ci(tmp_path):
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_chromium(tmp_path / "no-chromium", {"CI": "true"})


def test_a_missing_chromium_skips_outside_ci(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require_chromium(tmp_path / "no-chromium", {})


def test_a_present_chromium_is_used(tmp_path):
    executable = tmp_path / "chromium"
    executable.write_text("")
    require_chromium(executable, {"CI": "true"})  # neither fails nor skips
