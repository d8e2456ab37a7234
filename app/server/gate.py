"""The in-app side of the shared studio's gate, and who this session is (calm_core.access.rules).

app/server/studio.py calls `passes_gate()` before any page runs: in local mode it returns True
at once. In shared mode the password is asked by the front door (app/server/front.py), before
Streamlit serves anything, so a session that reaches this script carries the door's
signed cookie and passes. Two cases remain for this gate: a shared studio without a
usable password (it serves nothing but the reason), and a script run without the door
(`streamlit run app/server/studio.py` by hand), which is refused in shared mode because the
door's protections (Host check, nothing before the password) would be missing. The
password field below is the fallback of that refusal's absence in tests: Streamlit's
documented pattern (a callback that compares with hmac.compare_digest and deletes what
was typed), plus a delay after FREE_TRIES wrong tries.
"""

from __future__ import annotations

import os
import time

import streamlit as st

from app.server import door_keys, front
from calm_core.access.guesses import FREE_TRIES
from calm_core.access.guesses import backoff as retry_delay
from calm_core.access.rules import (
    SECRETS_KEY,
    Access,
    access_from,
    check_password,
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


NO_DOOR = (
    "This studio is shared but was started without its front door, so it serves nothing: start it with "
    "`bash scripts/studio.sh --share` (or `streamlit run app/main.py`), not app/server/studio.py."
)


def _cookie_header() -> str | None:
    """The `Cookie` header of this session's WebSocket handshake, whole: every value of the
    sign-in cookie is read (door_keys.grant_in), so a bogus one set first cannot hide the real one."""
    try:
        return st.context.headers.get("cookie")
    except Exception:  # no request behind this run (AppTest): no cookie
        return None


def this_browser() -> str | None:
    """The opaque tag of this signed-in browser (the device id its sign-in carries), which
    every session of that browser shares: the per-browser run quota counts it. None in
    local mode or without a sign-in."""
    grant = door_keys.grant_in(_cookie_header())
    return session_tag(grant.device) if grant is not None and grant.device else None


def _served_by_a_server() -> bool:
    """Whether this script runs for a browser through a Streamlit server, not under
    AppTest (whose runtime is a stand-in of another type)."""
    from streamlit import runtime
    from streamlit.runtime import Runtime

    return runtime.exists() and type(runtime.get_instance()) is Runtime


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
    if access.refusal:
        st.error(access.refusal)
        return False
    if st.session_state.get(PASSED) or door_keys.grant_in(_cookie_header()) is not None:
        return True
    if _served_by_a_server() and not front.door_is_open():
        st.error(NO_DOOR)
        return False
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
