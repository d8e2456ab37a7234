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

Ports are ignored by the Host check: the port is already the server's own. The parser is
strict: userinfo (`localhost:80@evil.example`), whitespace, control characters and a
non-numeric port make a header name nothing, so it is refused.

The Origin check (`origin_permitted`) is where ports count. A page on another port of
the same host (a notebook server, a student's app) is another origin to the browser but
the same site to its cookies (SameSite ignores ports), so a WebSocket it opens to the
studio carries the user's cookie. The studio therefore accepts a WebSocket handshake
and every state-changing request only from its own origin (scheme, host and port, as the
request itself names them) or from a name given with `--host` / CALM_STUDIO_HOSTS (the
operator's public name behind a proxy, on any port). A request without an Origin (not a
browser: it cannot carry a victim's cookie) passes this check.

Pure functions; app/server/front.py applies them to every HTTP request and WebSocket handshake.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping, Sequence

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


MAX_HOST_CHARS = 260  # a DNS name is at most 253 characters, plus ":" and a port


def host_name(host_header: str | None) -> str:
    """The name of a `Host` header, lower-case, without port, brackets or a final dot:
    "[::1]:8501" -> "::1", "Example.org.:80" -> "example.org". Anything that is not
    `name[:port]` or `[IPv6][:port]` gives "" (refused): userinfo, whitespace, control
    characters, a port that is not digits, an overlong header."""
    return split_host(host_header)[0]


def split_host(host_header: str | None) -> tuple[str, str]:
    """(name, port) of a `Host` header or an origin's authority, both "" when malformed;
    port "" when none is given."""
    text = (host_header or "").lower()
    if not text or len(text) > MAX_HOST_CHARS or any(c in _FORBIDDEN or ord(c) < 33 or ord(c) > 126 for c in text):
        return "", ""
    if text.startswith("["):  # [IPv6]:port
        end = text.find("]")
        name, rest = (text[1:end], text[end + 1 :]) if end > 0 else ("", "")
        if rest and not rest.startswith(":"):
            return "", ""
        port = rest[1:]
        if not name or _ip(name) is None:
            return "", ""
    elif text.count(":") > 1:
        return "", ""
    else:
        name, _, port = text.partition(":")
    if (port or ":" in text.replace(f"[{name}]", "")) and not port.isdigit():
        return "", ""
    return name.rstrip("."), port


_FORBIDDEN = set("@/\\?#%'\"<>`{}|^ ")


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
    return tuple(name for name in (host_name(part.strip()) for part in environ.get(HOSTS_ENV, "").split(",")) if name)


def allowed_hosts(environ: Mapping[str, str], shared: bool) -> HostRule:
    """The rule of a server started with this environment, in its mode."""
    return HostRule(names=LOCAL_NAMES + user_hosts(environ), ip_literals=shared)


DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


def origin_permitted(origin: str | None, scheme: str, host_header: str | None, given_names: Sequence[str]) -> bool:
    """Whether a request that says it comes from `origin` may act on the studio it reached
    under `scheme` and `host_header`: no Origin (not a browser), its own origin exactly
    (scheme, host and port, default ports filled in), or one of `given_names` (`user_hosts`:
    any port, the operator vouches for that name). "null" and anything malformed: no."""
    if origin is None:
        return True
    parsed = _origin_parts(origin)
    if parsed is None:
        return False
    o_scheme, o_name, o_port = parsed
    own_name, own_port = split_host(host_header)
    web_scheme = "https" if scheme in ("https", "wss") else "http"
    if o_name and o_name == own_name and o_scheme == web_scheme:
        if (o_port or DEFAULT_PORTS[o_scheme]) == (own_port or DEFAULT_PORTS[web_scheme]):
            return True
    return bool(o_name) and any(_matches(o_name, pattern) for pattern in given_names)


def _origin_parts(origin: str) -> tuple[str, str, str] | None:
    """(scheme, name, port) of an Origin header value, or None."""
    scheme, sep, authority = origin.strip().partition("://")
    if not sep or scheme.lower() not in ("http", "https") or "/" in authority:
        return None
    name, port = split_host(authority)
    return (scheme.lower(), name, port) if name else None
