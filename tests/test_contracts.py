"""Contract tests over the registries: every method, task and post-hoc calibrator that
discovery finds gets the same checks, so a new plugin is tested the moment it exists (as
PEFT runs its TEST_CASES over every adapter type).

    .venv/bin/python -m pytest tests/test_contracts.py -q
"""

from __future__ import annotations

import dataclasses
import inspect
import types

import numpy as np
import pytest

from calm_core.calibration.head import SCOPES
from calm_core.calibration.posthoc import calibrators, load_calibrator
from calm_core.training.config import OPTIMIZERS, TrainConfig
from calm_core.training.context import Task
from calm_core.training.methods import METHODS, OPTIONAL, as_method
from calm_core.training.tasks import TASKS


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_has_the_methods_shape(name: str) -> None:
    method = METHODS[name]
    assert method.NAME == name and isinstance(method.USES_HEAD, bool)
    assert isinstance(method.DESCRIPTION, str) and method.DESCRIPTION.strip()
    assert list(inspect.signature(method.step).parameters) == ["ctx", "train_items", "heldout_items"]
    assert method.OPTIMIZER in OPTIMIZERS
    assert method.FORCED_SCOPE is None or method.FORCED_SCOPE in SCOPES
    assert method.Settings is None or dataclasses.is_dataclass(method.Settings)
    cfg = TrainConfig(method=name)  # the config accepts it with every default
    if method.step_cost is not None:
        assert method.step_cost(cfg) >= 1.0  # in SFT steps: a method's step costs at least one


def test_a_method_module_missing_a_required_name_is_refused_and_optional_ones_get_defaults() -> None:
    broken = types.ModuleType("doc_methods.broken")
    broken.NAME, broken.USES_HEAD = "broken", False
    with pytest.raises(ValueError, match=r"doc_methods.broken to define \['DESCRIPTION', 'step'\]"):
        as_method(broken)
    broken.DESCRIPTION, broken.step = "x", lambda ctx, train_items, heldout_items: {}
    method = as_method(broken)
    assert {name: getattr(method, name) for name in OPTIONAL} == OPTIONAL


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_has_the_tasks_shape(name: str) -> None:
    task = TASKS[name]
    assert task.NAME == name and task.ITEM_KIND in ("mc", "open") and isinstance(task.SELECTS, bool)
    assert task.METHODS is None or set(task.METHODS) <= set(METHODS)
    declared = [n for n in vars(Task) if not n.startswith("_")] + list(Task.__annotations__)
    missing = [n for n in declared if not hasattr(task, n)]
    assert not missing, f"task {name} lacks {missing} (training/context.py Task)"
    for member, value in vars(Task).items():
        if callable(value) and not member.startswith("_"):
            expected = list(inspect.signature(value).parameters)[1:]  # without self
            assert list(inspect.signature(getattr(task, member)).parameters) == expected, member


@pytest.mark.parametrize("name", sorted(calibrators()))
def test_every_calibrator_fits_saves_loads_and_gives_distributions(name: str, tmp_path) -> None:
    cls = calibrators()[name]
    assert cls.name == name and isinstance(cls.label, str) and isinstance(cls.default, bool)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 4)) * 3.0
    labels = (logits + rng.gumbel(size=logits.shape)).argmax(axis=1)
    features = (rng.normal(size=(200, 3)),) if cls.reads_features else ()  # ats reads hidden states
    fitted = cls.fit(logits, labels, *features)
    probs = fitted.probs(logits, *features)
    assert probs.shape == logits.shape and np.allclose(probs.sum(axis=1), 1.0) and (probs >= 0).all()
    fitted.save(tmp_path / f"{name}.json")
    loaded = load_calibrator(tmp_path / f"{name}.json")
    assert type(loaded) is cls
    np.testing.assert_allclose(loaded.probs(logits, *features), probs, atol=1e-12)
