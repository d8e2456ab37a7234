"""CALM Studio: `streamlit run app/main.py`.

The server: Streamlit's ASGI app over the page router (app/studio.py), behind the front
door (app/front.py), which checks the Host of every request and, in a shared studio,
asks for the password before Streamlit serves anything. `streamlit run` finds `app`
below and serves it with uvicorn; `.streamlit/config.toml` still applies.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Uvicorn (Streamlit's server) would take X-Forwarded-For from any local process as the
# client's address; the front door decides whom to believe (CALM_TRUSTED_PROXIES,
# calm_core/workspace/clients.py), so uvicorn believes nobody.
os.environ["FORWARDED_ALLOW_IPS"] = ""

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `app.*` imports when imported by streamlit's uvicorn

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app import warmup  # noqa: E402
from app.front import DoorRules, FrontDoor  # noqa: E402
from app.gate import studio_access  # noqa: E402
from calm_core.workspace.clients import trusted_proxies  # noqa: E402
from calm_core.workspace.hosts import allowed_hosts, user_hosts  # noqa: E402


def door_rules() -> DoorRules:
    """The door's rules from the server's mode, read once Streamlit's config is loaded."""
    access = studio_access()
    base = "/" + st.get_option("server.baseUrlPath").strip("/") if st.get_option("server.baseUrlPath") else ""
    return DoorRules(
        access=access,
        hosts=allowed_hosts(os.environ, access.shared),
        base=base.rstrip("/"),
        proxies=trusted_proxies(os.environ),
        given_names=user_hosts(os.environ),
    )


warmup.start_in_background()  # PyTorch and the scoring code load while the server waits for a browser
app = st.App(str(Path(__file__).with_name("studio.py")), middleware=[Middleware(FrontDoor, rules=door_rules)])
