"""`python -m gpuplane_cli ...`: the same as the `gpuplane` command."""
from gpuplane_cli.main import main

raise SystemExit(main())
