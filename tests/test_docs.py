"""The README and docs/ point only inside the repository, and every link of theirs resolves."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[1]
DOCS = [BASE_DIR / "README.md", *sorted((BASE_DIR / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# Written in parallel (the installation guide); linked before it lands.
PENDING = {BASE_DIR / "docs" / "install.md"}


@pytest.mark.parametrize("document", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves_inside_the_repository(document):
    text = document.read_text()
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL (http:, https:, mailto:)
        resolved = (document.parent / target).resolve()
        assert resolved.is_relative_to(BASE_DIR), f"{document.name} points outside the repository: {target}"
        assert resolved.exists() or resolved in PENDING, f"{document.name} links {target}, which does not exist"


@pytest.mark.parametrize("document", DOCS, ids=lambda p: p.name)
def test_nothing_sends_a_reader_outside_the_repository(document):
    text = document.read_text()
    assert "DESIGN.md" not in text and "shared/" not in text


def test_the_readme_is_a_quick_start_and_a_map():
    readme = (BASE_DIR / "README.md").read_text()
    assert len(readme.splitlines()) < 120
    for section in ("## Quick start", "## Roles", "## Where to read on", "## Map of the code"):
        assert section in readme
    roles = " ".join(readme.split("## Roles")[1].split("##")[0].split())
    assert "**operator**: also deploys and deletes workloads, and runs rollouts" in roles
    assert "approves or rejects consolidation plans (admin only)" in roles
