"""Which `Host` header the studio answers: the defence against DNS rebinding.

    allowed = allowed_hosts(os.environ, shared=False)   # HostRule(names=('localhost', ...), ip_literals=False)
    allowed.permits("127.0.0.1:8501")                    # True
    allowed.permits("evil.example:8501")                 # False: a rebound name

Why: a web page the user visits can make its own name resolve to 127.0.0.1 (DNS
rebinding); the browser then treats the local studio as that page's origin and lets the
page read and drive it, password-less in local mode. The name in the `Host` header is
the one thing such a page cannot fake, so the studio answers only names it knows, as
Jupyter and TensorBoard do:

- **local** (the default): localhost names and loopback addresses only;
- **shared**: those, any IP address literal (a page cannot rebind an address, only a
  name), and the names the person starting it gave (`--share --host NAME`, or
  CALM_STUDIO_HOSTS for a reverse proxy's public name). A name may start with `*.` for
  its subdomains.

Ports are ignored: the port is already the server's own. Pure functions; app/front.py
applies them to every HTTP request and WebSocket handshake.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping

HOSTS_ENV = "CALM_STUDIO_HOSTS"  # extra names, separated by commas
LOCAL_NAMES = ("localhost", "*.localhost")


@dataclass(frozen=True)
class HostRule:
    """The names a server answers, and whether it also answers any IP literal."""

    names: tuple[str, ...]
    ip_literals: bool

    def permits(self, host_header: str | None) -> bool:
        """Whether a request with this `Host` header may be served (no header: no)."""
        name = host_name(host_header)
        if not name:
            return False
        address = _ip(name)
        if address is not None:
            return address.is_loopback or self.ip_literals
        return any(_matches(name, pattern) for pattern in self.names)


def host_name(host_header: str | None) -> str:
    """The name of a `Host` header, lower-case, without port, brackets or a final dot:
    "[::1]:8501" -> "::1", "Example.org.:80" -> "example.org"."""
    text = (host_header or "").strip().lower()
    if text.startswith("["):  # [IPv6]:port
        return text[1 : text.find("]")] if "]" in text else ""
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("*."):
        return name.endswith(pattern[1:])
    return name == pattern


def user_hosts(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The names given in CALM_STUDIO_HOSTS (commas), cleaned as `host_name` cleans a header."""
    return tuple(name for name in (host_name(part) for part in environ.get(HOSTS_ENV, "").split(",")) if name)


def allowed_hosts(environ: Mapping[str, str], shared: bool) -> HostRule:
    """The rule of a server started with this environment, in its mode."""
    return HostRule(names=LOCAL_NAMES + user_hosts(environ), ip_literals=shared)
