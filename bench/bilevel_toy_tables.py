"""The numbers docs/bilevel.md prints from the bilevel toys: each solver's answer against
the exact bilevel optimum, and the lower level under minibatches.

    python -m bench.bilevel_toy_tables              # the table in docs/bilevel.md
    python -m bench.bilevel_toy_tables --minibatch  # the lower level under minibatches
    python -m bench.bilevel_toy_tables --adaptive   # a temperature that depends on a feature
    python -m bench.bilevel_toy_tables --steps 40   # the first table in seconds (a smoke run)

The toys and the context that runs the project's method steps on them live in
bench.bilevel_toys; this module holds the
experiments: `lower_level_run` (how far theta ends from theta*(alpha), on the whole of
S_T), the minibatch table's rows (`MINIBATCH_RUNS`), the adaptive head's runs
(`ADAPTIVE_RUNS`, `temperature_fit`) and the three printed tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from calm_core.training.bilevel import BilevelConfig
from bench.bilevel_toys import (
    AdaptiveTemperatureToy,
    ShiftToy,
    TemperatureToy,
    ToyContext,
    ToySettings,
    centred,
    tail_mean,
)


def lower_level_run(
    toy: ShiftToy,
    steps: int,
    lr_alpha: float,
    lr_theta: float,
    settings: ToySettings | None = None,
    batch_size: int | None = None,
    heldout_batch_size: int | None = None,
    seed: int = 0,
    tail: int | None = None,
    method: Any = None,
    solved_start: bool = False,
) -> dict[str, float]:
    """Run `method` (calm by default) for `steps` steps from alpha = 0, theta = 0 and say
    whether the lower level stayed solved, measured on the whole of S_T at the end:

    gap        L(theta; alpha) - L(theta*(alpha); alpha), theta* the exact inner solution
    acc_drop   train accuracy of theta*(alpha) minus that of theta
    acc        train accuracy of theta
    lambda, inner_drop   means over the run of the step's lambda and inner_drop_frac
    alpha      the end value (TemperatureToy: s = log tau; ShiftToy: l centred)
    fit_lost   gap / (L(0; alpha) - L(theta*; alpha)): the share of what theta's fit is worth
               at this alpha that theta has lost (0: solved; 1: no better than theta = 0);
               it discounts TemperatureToy's flattening (every gap shrinks as tau grows)
    gap_start  the gap at the start: 0 with `solved_start` (theta = theta*(alpha_init),
               like a model that already fits its training questions), else L(0) - L*
    gap_tail   the mean gap over the last `tail` steps (default: a quarter of the run),
               sampled every tenth of them: minibatch iterates jitter around their trend
    """
    from calm_core.training.methods import calm

    ctx = ToyContext(
        toy,
        lr_alpha=lr_alpha,
        lr_theta=lr_theta,
        settings=settings or ToySettings(),
        batch_size=batch_size,
        heldout_batch_size=heldout_batch_size,
        seed=seed,
    )
    if solved_start:
        with torch.no_grad():
            ctx.theta[0].copy_(toy.inner_solution(ctx.alpha_value))
    method = method or calm
    tail = tail if tail is not None else max(1, steps // 4)
    every = max(1, tail // 10)
    logs, gaps = [], []

    def gap_now() -> tuple[float, torch.Tensor, torch.Tensor, torch.Tensor]:
        alpha, w = ctx.alpha_value, ctx.theta[0].detach().clone()
        best = toy.inner_solution(alpha)
        return float(toy.lower(w, alpha) - toy.lower(best, alpha)), alpha, w, best

    gap_start = gap_now()[0]
    for i in range(steps):
        logs.append(ctx.step(method))
        if i >= steps - tail and (steps - 1 - i) % every == 0:
            gaps.append(gap_now()[0])
    gap, alpha, w, best = gap_now()
    mean = lambda key: sum(r.get(key, 0.0) for r in logs) / len(logs)  # noqa: E731
    worth = float(toy.lower(toy.theta_init(), alpha) - toy.lower(best, alpha))
    return {
        "gap_start": gap_start,
        "gap": gap,
        "gap_tail": sum(gaps) / len(gaps),
        "fit_lost": gap / worth,
        "lower": float(toy.lower(w, alpha)),
        "lower_star": float(toy.lower(best, alpha)),
        "acc": toy.train_accuracy(w, alpha),
        "acc_star": toy.train_accuracy(best, alpha),
        "acc_drop": toy.train_accuracy(best, alpha) - toy.train_accuracy(w, alpha),
        "lambda": mean("lambda"),
        "inner_drop": mean("inner_drop_frac"),
        "alpha": alpha if isinstance(toy, TemperatureToy) else centred(alpha),
    }


@dataclass(frozen=True)
class MinibatchRun:
    """One row of the minibatch table: a toy, step sizes, a BOME setting and a batch size."""

    toy: str  # "shift" or "temperature"
    label: str
    lr_alpha: float
    lr_theta: float
    bilevel: BilevelConfig
    batch_size: int | None  # None: full batch
    steps: int = 600


def _runs(
    toy: str, lr: float, steps: int, rows: list[tuple[str, float, dict[str, Any], int | None]]
) -> list[MinibatchRun]:
    return [
        MinibatchRun(toy, label, lr, lr * theta_factor, BilevelConfig(**cfg), b, steps)
        for label, theta_factor, cfg, b in rows
    ]


_PERSIST = {"inner_start": "persistent"}
MINIBATCH_RUNS = [
    *_runs(
        "shift",
        0.2,
        600,
        [
            ("default (eta 0.5, phi grad)", 1.0, {}, None),
            ("default", 1.0, {}, 4),
            ("default, B = 64", 1.0, {}, 64),
            ("lr_theta / 10", 0.1, {}, 4),
            ("inner_start persistent", 1.0, _PERSIST, 4),
            ("phi value", 1.0, {"phi": "value"}, 4),
            ("persistent + phi value", 1.0, {**_PERSIST, "phi": "value"}, 4),
            ("eta 2", 1.0, {"eta": 2.0}, 4),
            ("eta 5", 1.0, {"eta": 5.0}, 4),
            ("eta 20", 1.0, {"eta": 20.0}, 4),
            ("lr_theta / 10 + eta 5", 0.1, {"eta": 5.0}, 4),
            ("lr_theta / 10 + eta 20", 0.1, {"eta": 20.0}, 4),
            ("lr_theta / 40 + eta 5", 0.025, {"eta": 5.0}, 4),
        ],
    ),
    *_runs(
        "temperature",
        0.01,
        1000,
        [
            ("default (eta 0.5, phi grad)", 1.0, {}, None),
            ("default", 1.0, {}, 4),
            ("lr_theta / 10", 0.1, {}, 4),
            ("inner_start persistent", 1.0, _PERSIST, 4),
            ("phi value", 1.0, {"phi": "value"}, 4),
            ("eta 5", 1.0, {"eta": 5.0}, 4),
            ("lr_theta / 10 + eta 5", 0.1, {"eta": 5.0}, 4),
        ],
    ),
]


def minibatch_row(run: MinibatchRun, seed: int = 0) -> dict[str, Any]:
    """`lower_level_run` for one table row, from theta = theta*(alpha_init) (a model that
    fits its training questions before the bilevel steps start, as on the real model)."""
    toy = ShiftToy() if run.toy == "shift" else TemperatureToy()
    return lower_level_run(
        toy,
        run.steps,
        run.lr_alpha,
        run.lr_theta,
        ToySettings(run.bilevel),
        run.batch_size,
        seed=seed,
        solved_start=True,
    )


def print_minibatch_table(runs: list[MinibatchRun] = MINIBATCH_RUNS) -> None:
    """The table of docs/bilevel_minibatch_section.md (markdown)."""
    print(
        "| toy | configuration | B | lr_alpha / lr_theta | steps | lower-level gap (tail mean) | gap (end) "
        "| fit lost (end) | train acc drop | lambda mean | inner drop mean | alpha end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        r = minibatch_row(run)
        alpha = r["alpha"]
        shown = (
            f"s {float(alpha[0]):.2f} (tau {math.exp(float(alpha[0])):.1f})"
            if run.toy == "temperature"
            else "(" + ", ".join(f"{float(v):.2f}" for v in alpha) + ")"
        )
        print(
            f"| {run.toy} | {run.label} | {run.batch_size or 'all'} | {run.lr_alpha:g} / {run.lr_theta:g} "
            f"| {run.steps} | {r['gap_tail']:.4f} | {r['gap']:.4f} | {r['fit_lost']:.1%} | {r['acc_drop']:+.3f} "
            f"| {r['lambda']:.2f} "
            f"| {r['inner_drop']:.3f} | {shown} |",
            flush=True,
        )


def temperature_fit(
    toy: AdaptiveTemperatureToy, alpha: torch.Tensor, reference: torch.Tensor | None = None
) -> dict[str, float]:
    """How well tau_alpha(h) tracks tau*(f) on S_V, with r = log(tau_alpha / tau*) per row:

    corr        Pearson correlation of log tau_alpha and log tau* (the shape's direction;
                meaningless once tau_alpha is nearly constant, so read it with `ratio`)
    rel_err     median |tau_alpha - tau*| / tau*
    shape_err   median |r - mean r|: the relative error left after the best global scale
    ratio       tau_alpha's high-to-low ratio: its geometric mean over the rows whose tau*
                is in the top tenth, over the bottom tenth's (`true_ratio` the same for tau*)
    scale       exp(mean r): the global scale, 1 when right
    to_ref      median |tau_alpha - tau_ref| / tau_ref against the head at `reference`
                (the joint optimum: the solver's own error, apart from the sample's)
    """
    tau, truth = toy.temperatures(alpha), toy.data.tau_heldout
    r = tau.log() - truth.log()
    order, tenth = truth.argsort(), len(truth) // 10

    def spread(v: torch.Tensor) -> float:
        logs = v.log()
        return math.exp(float(logs[order[-tenth:]].mean() - logs[order[:tenth]].mean()))

    ref = toy.temperatures(reference) if reference is not None else tau
    return {
        "corr": float(torch.corrcoef(torch.stack([tau.log(), truth.log()]))[0, 1]),
        "rel_err": float(((tau - truth).abs() / truth).median()),
        "shape_err": float((r - r.mean()).abs().median()),
        "ratio": spread(tau),
        "true_ratio": spread(truth),
        "scale": math.exp(float(r.mean())),
        "to_ref": float(((tau - ref).abs() / ref).median()),
    }


@dataclass(frozen=True)
class AdaptiveRun:
    """One solver of the adaptive table: a method, a constraint, step sizes, and the step
    counts at which its alpha is measured (one run, read at each)."""

    label: str
    method: str  # "calm" or "iterate"
    constraint: str  # BilevelConfig.constraint ("theta": the paper's)
    lr_alpha: float
    lr_theta: float
    at_steps: tuple[int, ...]


ADAPTIVE_RUNS = [
    AdaptiveRun("calm, constraint joint", "calm", "joint", 0.3, 0.1, (100, 500)),
    AdaptiveRun("calm, constraint joint", "calm", "joint", 0.1, 0.05, (500,)),
    AdaptiveRun("calm, constraint theta (the paper's)", "calm", "theta", 0.3, 0.1, (100, 500, 2000)),
    AdaptiveRun("iterate", "iterate", "theta", 0.3, 0.1, (100, 500, 2000)),
]


def adaptive_run(
    toy: AdaptiveTemperatureToy, run: AdaptiveRun, reference: torch.Tensor | None = None
) -> list[dict[str, float]]:
    """Run the project's step from the base model (theta = 0) and the head's start (tau = 1);
    `temperature_fit` (against `reference` too) and F(alpha, theta) at each of `run.at_steps`."""
    from calm_core.training.methods import calm, iterate

    method = calm if run.method == "calm" else iterate
    settings = ToySettings(BilevelConfig(constraint=run.constraint))
    ctx = ToyContext(toy, lr_alpha=run.lr_alpha, lr_theta=run.lr_theta, settings=settings)
    rows = []
    for steps in run.at_steps:
        ctx.run(method, steps - ctx.steps_done)
        theta, alpha = ctx.theta[0].detach(), ctx.alpha_value
        rows.append({"steps": steps, **temperature_fit(toy, alpha, reference), "F": float(toy.upper(theta, alpha))})
    return rows


def _adaptive_line(label: str, steps: str, fit: dict[str, float]) -> str:
    return (
        f"| {label} | {steps} | {fit['corr']:.3f} | {fit['rel_err']:.3f} | {fit['shape_err']:.3f} "
        f"| {fit['ratio']:.2f} | {fit['scale']:.2f} | {fit['to_ref']:.3f} | {fit['F']:.4f} |"
    )


def print_adaptive_table(toy: AdaptiveTemperatureToy | None = None, runs: list[AdaptiveRun] = ADAPTIVE_RUNS) -> None:
    """The table of docs/bilevel.md's adaptive-head section (markdown), then the paper's
    bilevel hypergradient at the truth (which way F(alpha, theta*(alpha)) descends from it)."""
    toy = toy or AdaptiveTemperatureToy()
    star, start = toy.alpha_star(), toy.alpha_init()
    theta_joint, alpha_joint = toy.joint_solution()
    truth = temperature_fit(toy, star, alpha_joint)
    tau = toy.data.tau_heldout
    print(
        f"S_V: {len(tau)} rows; tau* from {float(tau.min()):.2f} to {float(tau.max()):.2f}, "
        f"high-to-low ratio {truth['true_ratio']:.2f}"
    )
    print(
        "| solver (lr_alpha / lr_theta) | steps | corr(log tau, log tau*) | median rel. error | shape error "
        "| tau ratio high / low | scale | median rel. diff to joint optimum | F |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(_adaptive_line("tau* (alpha*, the truth)", "-", {**truth, "F": toy.value(star)}))
    joint = {**temperature_fit(toy, alpha_joint, alpha_joint), "F": float(toy.upper(theta_joint, alpha_joint))}
    print(_adaptive_line("joint lower-level optimum (exact, Newton)", "-", joint))
    print(
        _adaptive_line(
            "tau = 1 (the head's start)", "0", {**temperature_fit(toy, start, alpha_joint), "F": toy.value(start)}
        )
    )
    for run in runs:
        for row in adaptive_run(toy, run, alpha_joint):
            label = f"{run.label} ({run.lr_alpha:g} / {run.lr_theta:g})"
            print(_adaptive_line(label, str(row["steps"]), row), flush=True)
    grad = toy.hypergradient(star)
    print(
        f"theta constraint, dF(alpha, theta*(alpha))/d alpha at alpha*: w {grad[:-1].numpy().round(4).tolist()}, "
        f"b {float(grad[-1]):.4f} (alpha* = w {star[:-1].numpy().round(3).tolist()}, b {float(star[-1]):.3f})"
    )


def main(argv: list[str] | None = None) -> None:
    import argparse

    from calm_core.training.methods import calm, iterate

    parser = argparse.ArgumentParser(description="The bilevel toys' tables (docs/bilevel.md).")
    parser.add_argument(
        "--minibatch",
        action="store_true",
        help="the lower level under minibatches of B = 4 (docs/bilevel_minibatch_section.md)",
    )
    parser.add_argument(
        "--adaptive",
        action="store_true",
        help="the adaptive head on a temperature that depends on a feature (AdaptiveTemperatureToy)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=4000,
        help="steps per solver in the first table, averaged over the last eighth (fewer: a smoke run)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a few numbers per tensor: threads only contend
    if args.minibatch:
        print_minibatch_table()
        return
    if args.adaptive:
        print_adaptive_table()
        return
    toy = ShiftToy()
    optimum = centred(toy.bilevel_optimum())
    tail = max(1, args.steps // 8)
    print(f"ShiftToy (K = 3, D = 2, mu = 0.05), l centred; {args.steps:,} steps, mean of the last {tail:,}")
    print(f"  {'solver':44} {'l':26} {'|l - l*|':>9} {'F':>9}")
    print(
        f"  {'bilevel optimum l* (exact)':44} {str(optimum.numpy().round(3)):26} {0.0:9.3f} {toy.value(optimum):9.5f}"
    )
    runs = [
        ("calm", calm, 0.3, 0.3, ToySettings()),
        ("calm", calm, 0.3, 0.1, ToySettings()),
        ("calm", calm, 0.15, 0.05, ToySettings()),
        (
            "calm, T = 100 fixed steps of 2",
            calm,
            0.3,
            0.1,
            ToySettings(BilevelConfig(inner_steps=100, inner_rule="fixed", inner_lr=2.0)),
        ),
        ("iterate", iterate, 0.15, 0.05, ToySettings()),
    ]
    for name, method, lr_alpha, lr_theta, settings in runs:
        found = tail_mean(ToyContext(toy, lr_alpha=lr_alpha, lr_theta=lr_theta, settings=settings), method, args.steps, tail)
        label = f"{name} (lr_alpha {lr_alpha}, lr_theta {lr_theta})"
        print(
            f"  {label:44} {str(found.numpy().round(3)):26} {float((found - optimum).norm()):9.3f} "
            f"{toy.value(found):9.5f}"
        )
    print("TemperatureToy: F(s, W*(s)) against tau (no finite optimum)")
    for row in TemperatureToy().profile([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]):
        print(
            f"  tau {row['tau']:6.2f}  held-out entropy {row['entropy']:.4f}  ||W*|| / tau {row['effective_scale']:.3f}"
        )


if __name__ == "__main__":
    main()
