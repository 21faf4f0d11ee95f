"""`gpuplane`, the command-line client of gpuplane's REST API (also `kubectl gpuplane`).

It talks only to `/api/v1/` over HTTP with a token and imports nothing from the server's
packages (tests/architecture/test_cli_boundary.py), so `pip install .` installs it alone.
"""

__version__ = "0.1.0"
