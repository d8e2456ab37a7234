"""The `calm` command: everything the studio does, headless.

    calm datasets [--kind mc|open]
    calm data split upload/quiz --sizes 0.6,0.2,0.2 --seed 0     # -> split/quiz/train|heldout|test
    calm train --preset quick [--detach] | calm runs | calm cancel RUN | calm resume RUN
    calm eval --model embedded --data arc/easy_test --scoring cloze --limit 300 \\
              [--fit-ts-on commonsenseqa/dev] [--json out.json] [--save-preds DIR]
    calm eval --run RUN_ID --data arc/easy_test         # a finished run on more data (results/added.py)
    calm selective RUN_ID --target-error 0.1            # a threshold to answer alone, chosen on S_V (cli/selective.py)

Errors a user can fix (unknown dataset, malformed file, model not found, an output
path that cannot be written) print one line, `calm: error: ...`, and exit with status 2;
no stack trace. Rows a dataset rejected are not errors: `calm eval` names them on
stderr (`calm: note: ...`, file, row and field) and counts them in `--json`.

Each group of subcommands has its module, with its flags and its functions: cli/data.py
(datasets, data split), cli/eval.py (eval), cli/train.py (train, runs, compare, report,
cancel, resume), cli/export.py (export: a folder, merged, pushed); this one parses,
dispatches and turns refusals into one line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from calm_core.cli import data as cli_data
from calm_core.cli import eval as cli_eval
from calm_core.cli import export as cli_export
from calm_core.cli import selective as cli_selective
from calm_core.cli import train as cli_train
from calm_core.cli.usage import UsageError
from calm_core.data.schema import DataError
from calm_core.logs import configure as configure_logging
from calm_core.runs.damage import RunFileError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calm", description="CALM Studio: calibration of LLMs, headless.")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of every error, not just of unexpected ones"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cli_data.add_parsers(sub)
    cli_eval.add_parsers(sub)
    cli_train.add_parsers(sub)
    cli_export.add_parsers(sub)
    cli_selective.add_parsers(sub)
    return parser


COMMANDS = {
    **cli_data.COMMANDS,
    **cli_eval.COMMANDS,
    **cli_train.COMMANDS,
    **cli_export.COMMANDS,
    **cli_selective.COMMANDS,
}


def is_refusal(exc: BaseException) -> bool:
    """Whether an exception is the project refusing bad input (one line for the user) rather
    than a bug (a traceback). The project's own error types are refusals, and so is a
    ValueError in its house style, "Expected ..., but got ..."; any other ValueError
    (from numpy, torch, a typo in our code) is not."""
    from calm_core.scoring.models import ModelLoadError

    if isinstance(exc, (DataError, ModelLoadError, RunFileError, UsageError, FileNotFoundError)):
        return True
    return isinstance(exc, ValueError) and str(exc).lstrip().startswith("Expected")


def main(argv: Sequence[str] | None = None) -> int:
    from calm_core.scoring.models import ModelLoadError

    args = build_parser().parse_args(argv)
    configure_logging()
    try:
        return COMMANDS[args.command](args)
    except (DataError, ModelLoadError, UsageError, ValueError, FileNotFoundError) as exc:
        if args.debug or not is_refusal(exc):
            raise  # a bug keeps its traceback
        # One line, whatever the exception text holds (row lists come on extra lines).
        print(
            "calm: error: " + "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()), file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        print("calm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `calm runs | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
