"""docs/install.md names every variable the image's processes read beyond README.md's, and every
object the production overlay installs."""
from __future__ import annotations

import re

from tests.deploy.rendering import BASE_DIR, render

DOCS = (BASE_DIR / "docs" / "install.md").read_text()
# What the image adds to gpuplane's settings: its entry point, gunicorn's configuration, the probes.
IMAGE_SOURCES = ("deploy/image/entrypoint", "gpuplane/gunicorn_conf.py", "gpuplane/liveness.py")
NEW_SETTINGS = ("GPUPLANE_ENV", "GPUPLANE_REDIS_KEY_PREFIX", "GPUPLANE_POD_IP", "GPUPLANE_STATIC_ROOT",
                "GPUPLANE_STATIC_BROTLI_QUALITY")


def test_every_variable_of_the_image_is_documented():
    read = set(NEW_SETTINGS)
    for source in IMAGE_SOURCES:
        text = (BASE_DIR / source).read_text()
        read |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)", text)) | set(re.findall(r"environ(?:\.get\(|\[)\"([A-Z][A-Z0-9_]+)\"", text))
        read |= set(re.findall(r'ENV_FILE = "([A-Z_]+)"', text))
    read -= {"NODE_NAME", "LOG_LEVEL", "GPUPLANE_AGENT_TOKEN"}  # README.md's (the agent's section)
    assert {"GPUPLANE_BIND", "WEB_CONCURRENCY", "CELERY_CONCURRENCY", "GPUPLANE_LIVENESS_FILE"} <= read
    assert sorted(name for name in read if f"`{name}`" not in DOCS) == []


def test_every_kind_of_object_installed_is_described():
    kinds = {obj["kind"] for obj in render("production")}
    missing = sorted(kind for kind in kinds if kind not in DOCS)
    assert missing == []
