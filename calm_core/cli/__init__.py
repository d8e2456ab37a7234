"""The `calm` command: `main` parses the subcommands (cli/commands.py); training, runs and
reports have their own module (cli/train.py). `python -m calm_core.cli` runs it."""

from calm_core.cli.commands import main

__all__ = ["main"]
