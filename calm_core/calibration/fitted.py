"""The error an estimator raises when it is used before it was fitted, scikit-learn's way.

    raise not_fitted(self)     # in predict / predict_proba / transform of an unfitted object

`NotFittedError` subclasses ValueError and AttributeError, as scikit-learn's does. Where
scikit-learn is loaded (a caller that catches its `NotFittedError`, or runs its estimator
checks, has imported it), the raised error is also an instance of scikit-learn's class; where
it is not, nothing imports it: scikit-learn is a development dependency, not a run-time one.
"""

from __future__ import annotations

import functools
import sys
from typing import Any


class NotFittedError(ValueError, AttributeError):
    """An estimator used before `fit` (or `calibrate`)."""


@functools.lru_cache(maxsize=1)
def _with_sklearn(sklearn_error: type[Exception]) -> type[NotFittedError]:
    """Ours and scikit-learn's at once: `except` of either catches it."""
    return type("NotFittedError", (NotFittedError, sklearn_error), {"__module__": __name__})


def not_fitted(estimator: Any, fit: str = "fit") -> NotFittedError:
    """The error for `estimator` used before `fit` (the message scikit-learn's checks read)."""
    message = (
        f"This {type(estimator).__name__} instance is not fitted yet. Call '{fit}' with appropriate "
        "arguments before using this estimator."
    )
    sklearn_exceptions = sys.modules.get("sklearn.exceptions")
    if sklearn_exceptions is None:
        return NotFittedError(message)
    return _with_sklearn(sklearn_exceptions.NotFittedError)(message)
