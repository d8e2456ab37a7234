"""CALM Studio: `streamlit run app/main.py`.

The server: Streamlit's ASGI app over the page router (app/server/studio.py), behind the front
door (app/server/front.py), which checks the Host of every request and, in a shared studio,
asks for the password before Streamlit serves anything. `streamlit run` finds `app`
below and serves it with uvicorn; `.streamlit/config.toml` still applies.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def _believe_no_forwarded_headers() -> None:
    """Uvicorn (Streamlit's server) takes X-Forwarded-For from any local process as the
    client's address, so a guesser could name a new address per try. The front door
    decides whom to believe (CALM_TRUSTED_PROXIES, calm_core/access/clients.py), so
    uvicorn must believe nobody. Streamlit builds uvicorn's Config (which reads
    FORWARDED_ALLOW_IPS) before importing this file, but uvicorn wraps the app in its
    ProxyHeadersMiddleware just after the import, looking the class up by name: a
    pass-through there leaves the connecting peer in place. tests/test_attacks_door.py
    sends invented addresses over the wire and fails if uvicorn still believes them."""
    os.environ["FORWARDED_ALLOW_IPS"] = ""
    try:
        import uvicorn.config
    except ImportError:
        return
    uvicorn.config.ProxyHeadersMiddleware = _PassThrough  # type: ignore[attr-defined,assignment]


class _PassThrough:
    def __init__(self, app: Any, trusted_hosts: Any = None) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


_believe_no_forwarded_headers()

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `app.*` imports when imported by streamlit's uvicorn

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from app.server import warmup  # noqa: E402
from app.server.front import DoorRules, FrontDoor  # noqa: E402
from app.server.gate import studio_access  # noqa: E402
from app.server.upload_quota import UploadQuota  # noqa: E402
from calm_core.access.clients import proxy_secret, trusted_proxies  # noqa: E402
from calm_core.access.hosts import allowed_hosts, user_hosts  # noqa: E402


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
        proxy_secret=proxy_secret(os.environ),
    )


warmup.start_in_background()  # PyTorch and the scoring code load while the server waits for a browser
# The door first (nothing before the password), then what an upload may hold (app/server/upload_quota.py).
middleware = [Middleware(FrontDoor, rules=door_rules), Middleware(UploadQuota)]
app = st.App(str(Path(__file__).parent / "server" / "studio.py"), middleware=middleware)
