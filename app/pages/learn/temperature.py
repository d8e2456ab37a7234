"""Learn's temperature slider: its range and step, and where Fit T puts it.

Why a module: the caption that reports the fitted T and the slider that Fit T moves must
show the same number (a caption rounding apart from its slider reads as a bug), so both read
`on_slider` and the page cannot round one way in one place and another in the other.
"""

from __future__ import annotations

T_MIN, T_MAX, T_STEP = 0.25, 8.0, 0.05  # the slider: a range wide enough for a random model's optimum to show
DECIMALS = 2  # T_STEP's decimals: the slider shows its value to these, and so does the caption


def on_slider(temperature: float) -> float:
    """The slider position nearest to `temperature`: on the T_STEP grid, within
    [T_MIN, T_MAX], rounded to DECIMALS so 77 * 0.05 is 3.85, not 3.8500000000000005."""
    steps = round((min(T_MAX, max(T_MIN, temperature)) - T_MIN) / T_STEP)
    return round(T_MIN + steps * T_STEP, DECIMALS)


def fitted_sentence(temperature: float) -> str:
    """The caption beside Fit T: the NLL-optimal temperature as the slider will show it,
    or, beyond the slider's range, the optimum itself and the end Fit T goes to."""
    if T_MIN <= temperature <= T_MAX:
        return (
            f"The temperature with the lowest NLL on these questions is T = {on_slider(temperature):.{DECIMALS}f} "
            f"(to the slider's step of {T_STEP:g})."
        )
    return (
        f"The temperature with the lowest NLL on these questions is T = {temperature:.{DECIMALS}f} "
        f"(beyond the slider: Fit T goes to {on_slider(temperature):g})."
    )
