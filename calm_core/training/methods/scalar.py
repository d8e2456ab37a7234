"""scalar: CALM with one shared temperature and no shift (the "learned TS" ablation).

Same step as `calm`; the trainer builds the head with scope "scalar" for this method.
"""

from __future__ import annotations

from calm_core.training.methods.calm import OPTIMIZER, step  # noqa: F401  (the step and its optimizer are CALM's)

NAME = "scalar"
LABEL = "CALM with one temperature"
USES_HEAD = True
FORCED_SCOPE = "scalar"
DESCRIPTION = "CALM ablation: bilevel with a single learned temperature (scalar scope)."
