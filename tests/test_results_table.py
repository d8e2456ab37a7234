"""scripts/results_table.py's verdicts on hand-made rows: (f) a set's ECE worse than
base's by more than 0.02 fails, (g) a mean AUROC below base's fails, and post-hoc
calibrators are judged beside the trained variants."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _table():
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(ece: float, auroc: float, acc: float = 0.6) -> dict:
    def m(v: float) -> dict:
        return {"mean": v, "lo": v - 0.01, "hi": v + 0.01, "seed_sd": 0.0}

    return {"acc": m(acc), "ece": m(ece), "auroc": m(auroc), "confidence": m(acc), "inv_k": 0.25, "seeds": 3}


def _verdicts(rows: dict, datasets: list[str]) -> dict:
    checks = _table().verdict_checks(rows, datasets, {d: 200 for d in datasets})
    return {key: {letter: met for letter, met, _ in found} for key, found in checks.items()}


def test_f_and_g_fail_where_a_set_gets_worse_and_pass_where_none_does() -> None:
    sets = ["in", "capitals", "units"]
    rows = {
        ("g", "base"): {"in": _row(0.39, 0.60), "capitals": _row(0.15, 0.67), "units": _row(0.25, 0.55)},
        ("g", "ts"): {"in": _row(0.17, 0.60), "capitals": _row(0.36, 0.67), "units": _row(0.24, 0.55)},
        ("g", "ats"): {"in": _row(0.10, 0.62), "capitals": _row(0.16, 0.70), "units": _row(0.20, 0.56)},
        ("g", "calm"): {"in": _row(0.09, 0.50), "capitals": _row(0.165, 0.60), "units": _row(0.26, 0.55)},
    }
    got = _verdicts(rows, sets)
    assert got[("g", "ts")]["f"] is False  # capitals 0.36 against base 0.15
    assert got[("g", "ats")]["f"] is True and got[("g", "ats")]["g"] is True
    assert got[("g", "calm")]["f"] is True  # 0.165 is within base + 0.02
    assert got[("g", "calm")]["g"] is False  # mean AUROC 0.55 below base's 0.607
    assert ("g", "base") not in got
