"""Fact tables behind the built-in demo datasets (see `calm_core.data.builtin`).

Plain Python data, written by hand from public knowledge; nothing is downloaded.
Tables are tuples of pairs rather than dicts on purpose: a repeated key in a dict
literal silently overwrites the first, while a tuple keeps both, so
`tests/test_builtin.py` can catch the duplicate.

    from calm_core.data.facts import CAPITALS
    dict(CAPITALS)["France"]  # -> "Paris"
"""

from calm_core.data.facts.animals import ANIMAL_CLASSES
from calm_core.data.facts.chemistry import ELEMENTS
from calm_core.data.facts.geography import CAPITALS
from calm_core.data.facts.units import CONVERSIONS, SI_PREFIXES, SI_UNITS

__all__ = ["ANIMAL_CLASSES", "CAPITALS", "CONVERSIONS", "ELEMENTS", "SI_PREFIXES", "SI_UNITS"]
