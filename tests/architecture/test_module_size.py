"""Rule 6: no module outside migrations over 400 lines; one concern per module keeps them short."""
from __future__ import annotations

from tests.architecture.graph import ROOT, line_count, source_files

MAX_LINES = 400
CHECKED = ("nodes", "scheduler", "gpuplane", "lifecycle", "savings", "rollouts", "consolidation", "bench", "tests",
           "gpuplane_cli")


def test_no_module_is_over_400_lines():
    sizes = [(line_count(path), path.relative_to(ROOT)) for path in source_files(ROOT, CHECKED)
             if "migrations" not in path.parts]
    assert len(sizes) > 100
    offenders = sorted(((n, path) for n, path in sizes if n > MAX_LINES), reverse=True)
    assert offenders == [], f"modules over {MAX_LINES} lines:\n" + "\n".join(f"    {p}: {n}" for n, p in offenders)
