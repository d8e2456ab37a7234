"""`python -m calm_core.cli ...`: the worker command that jobs start (runs/jobs.py)."""

import sys

from calm_core.cli.commands import main

sys.exit(main())
