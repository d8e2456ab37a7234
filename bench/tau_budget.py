"""Is CALM's learned temperature an optimum or a step budget? Train scalar CALM on the
embedded model for N steps, for 2N steps and for N steps at 2x lr_alpha, and compare the
final tau (and what the forecast looks like) for each BOME constraint.

    .venv/bin/python bench/tau_budget.py [--steps 100] [--constraints theta joint] [--json bench/results/tau_budget.json]
    .venv/bin/python bench/tau_budget.py --model tiny --steps 1 --constraints theta   # the script runs

Built-in capitals (the model is right about 86-89% of the time there), cloze scoring,
the `quick` preset's LoRA (r 8, top 4 layers), BOME with its defaults (T = 10, Polyak
inner steps, a plain step). A temperature that is an optimum moves by under 10% when the
steps or lr_alpha double (`tau x2 steps` and `tau x2 lr` are the ratios to the base
run's tau); one that is a step budget moves with them. Each row also gives accuracy,
ECE, AUROC, mean confidence and 1/K on capitals test, so a near-uniform forecast shows.
`--model tiny` (tests/conftest.py's random tiny Llama) makes a smoke run: the same three
trainings per constraint in seconds, whose taus mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = {"train_data": "builtin/capitals/train", "heldout_data": "builtin/capitals/validation",
        "eval_data": ["builtin/capitals/test"]}
EVAL = "builtin/capitals/test"


def run_one(constraint: str, steps: int, lr_alpha: float, model: str, seed: int) -> dict:
    """Train one configuration of `model` (a name or folder load_model takes); returns its
    final tau and the test set's metrics."""
    from calm_core.scoring.models import load_model
    from calm_core.training.config import TrainConfig, preset_settings
    from calm_core.training.loop import train

    settings = preset_settings("quick", {**DATA, "method": "scalar", "constraint": constraint, "steps": steps,
                                         "lr_alpha": lr_alpha, "eval_every": 0, "seed": seed,
                                         "inner_steps": 10, "model": model})
    cfg = TrainConfig.from_dict(settings)
    started = time.perf_counter()
    result = train(cfg, lm=load_model(model))
    record = result.last_metrics
    return {"constraint": constraint, "steps": steps, "lr_alpha": lr_alpha, "seed": seed,
            "tau": record["alpha/tau_mean"], "acc": record[f"eval/{EVAL}/acc"], "ece": record[f"eval/{EVAL}/ece"],
            "auroc": record[f"eval/{EVAL}/auroc"], "confidence": record[f"eval/{EVAL}/confidence"],
            "lower_loss": record["train/lower_loss"], "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--lr-alpha", type=float, default=None, help="default: the plain step's DEFAULT_LR")
    parser.add_argument("--constraints", nargs="+", default=["theta", "joint"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="embedded", help="embedded, a model directory, or tiny (a smoke run)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/tau_budget.json")
    args = parser.parse_args()
    from bench.streaming import model_or_tiny
    from calm_core.training.config import DEFAULT_LR

    lr = args.lr_alpha or DEFAULT_LR["sgd"]["lr_alpha"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="calm-tau-budget-") as scratch:
        model = model_or_tiny(args.model, Path(scratch))
        for constraint in args.constraints:
            for steps, lr_alpha in ((args.steps, lr), (2 * args.steps, lr), (args.steps, 2 * lr)):
                rows.append(run_one(constraint, steps, lr_alpha, model, args.seed))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("constraint steps lr_alpha    tau  tau/base    acc    ece  auroc   conf  (1/K = 0.25)")
    for row in rows:
        base = next(r for r in rows if r["constraint"] == row["constraint"] and r["steps"] == args.steps
                    and r["lr_alpha"] == lr)
        print(f"{row['constraint']:10} {row['steps']:5} {row['lr_alpha']:8.3g} {row['tau']:6.2f} "
              f"{row['tau'] / base['tau']:9.2f} {row['acc']:6.3f} {row['ece']:6.3f} {row['auroc']:6.3f} "
              f"{row['confidence']:6.3f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rows": rows, "steps": args.steps, "lr_alpha": lr, "model": args.model}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
