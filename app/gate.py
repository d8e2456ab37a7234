"""The shared studio's password gate, and who this session is (calm_core.workspace.access).

app/main.py calls `passes_gate()` before any page runs: in local mode it returns True
at once; in shared mode the session sees only the gate until the password is right,
and a shared studio without a password serves nothing but how to set one. The pattern
is Streamlit's documented one (a password field whose callback compares with
hmac.compare_digest and deletes what was typed from the session state), plus a delay
after FREE_TRIES wrong tries.
"""

from __future__ import annotations

import os
import time

import streamlit as st

from calm_core.workspace.access import (
    FREE_TRIES,
    HOW_TO_SET,
    SECRETS_KEY,
    Access,
    access_from,
    check_password,
    retry_delay,
    session_tag,
)

PASSED = "gate_passed"
FAILURES = "gate_failures"
FIELD = "gate_password"


def studio_access() -> Access:
    """The mode of this server: its environment, its `server.address` and the secrets."""
    return access_from(os.environ, st.get_option("server.address"), _secrets_password())


def _secrets_password() -> str | None:
    try:
        value = st.secrets.get(SECRETS_KEY)
    except Exception:  # no secrets file: Streamlit raises rather than returning nothing
        return None
    return str(value) if value else None


def this_session() -> str | None:
    """The opaque tag of this browser session (None outside a Streamlit session)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return session_tag(ctx.session_id) if ctx is not None else None


def _wait(seconds: float) -> None:
    """The delay after too many wrong tries: this session's script thread only, other
    sessions go on (a module function, so a test can record it)."""
    if seconds > 0:
        time.sleep(seconds)


def _password_entered(expected: str) -> None:
    """The field's callback: wait if this session has failed too often, compare in
    constant time, and never keep what was typed."""
    typed = st.session_state.pop(FIELD, "")
    failures = st.session_state.get(FAILURES, 0)
    _wait(retry_delay(failures))
    if check_password(typed, expected):
        st.session_state[PASSED], st.session_state[FAILURES] = True, 0
    else:
        st.session_state[PASSED], st.session_state[FAILURES] = False, failures + 1


def passes_gate(access: Access) -> bool:
    """True when this session may see the pages; otherwise draws the gate (or the
    refusal of a shared studio without a password) and returns False."""
    if not access.shared:
        return True
    if access.refuses_to_serve:
        st.error("This studio is shared but has no password, so it serves nothing. " + HOW_TO_SET)
        return False
    if st.session_state.get(PASSED):
        return True
    st.markdown("### CALM Studio")
    st.text_input(
        "Password",
        type="password",
        key=FIELD,
        on_change=_password_entered,
        args=(access.password,),
        help="This studio is shared: ask whoever started it for the password.",
    )
    failures = st.session_state.get(FAILURES, 0)
    if failures:
        delay = retry_delay(failures)
        tries = f"{failures} wrong {'try' if failures == 1 else 'tries'}"
        st.error(
            f"Wrong password ({tries})."
            + (f" Too many wrong tries: the next one waits {delay:.0f} s." if delay else "")
        )
    elif FAILURES not in st.session_state:
        st.caption(f"A shared studio. After {FREE_TRIES} wrong tries each new try waits longer.")
    return False
