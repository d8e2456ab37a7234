"""`calm export`: a run as a folder another machine loads, optionally merged or pushed.

    calm export RUN_ID DIR                                  # adapter + calm_head.py + model card (transformers + peft)
    calm export RUN_ID DIR --variant ts                     # the untouched model with a post-hoc calibrator as a head
    calm export RUN_ID DIR --merged                         # plain transformers weights (vLLM, TGI), the head folded
    calm export RUN_ID DIR --push-to-hub me/model [--public]   # also uploaded, to a private repo by default

The folder is calm_core.export.folder's (merged: export_merged's); the upload is
export/hub_push.py's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from calm_core.export.hub_push import push_folder
from calm_core.runs.rundir import RunDir


def add_parsers(sub: Any) -> None:
    ex = sub.add_parser(
        "export", help="a folder that loads with transformers + peft alone: adapter, head (calm_head.py), model card"
    )
    ex.add_argument("run_id")
    ex.add_argument("target", type=Path)
    ex.add_argument(
        "--variant",
        help="the trained model at its selected step (default; the variant of a threshold saved with "
        "`calm selective --save` when it is another), base, ts, vs, ats (a temperature per "
        "question, read from its hidden state), thermometer (one temperature per set of questions, read "
        "from their mean hidden state: needs a batch of the target domain's inputs, no answers), or "
        "recommended (the run's recommendation on S_V); every variant loads the same way",
    )
    ex.add_argument(
        "--thermometer",
        type=Path,
        metavar="FILE",
        help="with --variant thermometer: the thermometer to export (default: the run's model's own, "
        "e.g. calm_core/calibration/thermometer_embedded.json); one of another model or scoring rule is refused",
    )
    ex.add_argument(
        "--merged",
        action="store_true",
        help="a plain transformers folder (vLLM, TGI): the adapter merged, the head's temperature folded into the "
        "LM head where it acts on token logits, else the card's formula; refused for a temperature read from the input",
    )
    ex.add_argument(
        "--push-to-hub",
        metavar="REPO",
        help="also upload the folder to this Hugging Face model repo (private unless --public; the token from "
        "HF_TOKEN or `hf auth login`)",
    )
    ex.add_argument("--public", action="store_true", help="with --push-to-hub: create the repo public")
    ex.add_argument("--runs-root", type=Path)


def cmd_export(args: argparse.Namespace) -> int:
    """A folder that loads with transformers + peft alone (calm_core.export.folder)."""
    from calm_core.export.folder import export_run, saved_threshold_variant

    if args.public and not args.push_to_hub:
        raise ValueError("Expected --public only with --push-to-hub, but no repo was given")
    run = RunDir.at(args.run_id, args.runs_root)
    variant, note = saved_threshold_variant(run, args.variant)  # the saved threshold's variant, or a line
    if note:
        print(note)
    folder = export_run(run, args.target, variant, args.thermometer, merged=args.merged)
    record = json.loads((folder / "calm_export.json").read_text())
    fold = f", merged: fold {record['merged']['fold']}" if args.merged else ""
    print(
        f"exported {args.run_id} ({record['variant']}, step {record['step']}{fold}) to {folder}; "
        f"base model {record['base_model_hub_id']}"
    )
    if args.push_to_hub:
        url = push_folder(folder, args.push_to_hub, private=not args.public)
        print(f"pushed to {url} ({'public' if args.public else 'private'})")
    return 0


COMMANDS = {"export": cmd_export}
