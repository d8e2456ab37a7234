"""Who a request comes from, as the guessing limits count it: an address that the client cannot choose.

    proxies = trusted_proxies(os.environ)                       # () unless CALM_TRUSTED_PROXIES names some
    client_key("127.0.0.1", ["203.0.113.7"], proxies)           # "127.0.0.1": the header is not trusted
    client_key("10.0.0.2", ["198.51.100.4, 10.0.0.2"], ("10.0.0.0/8",) parsed)  # "198.51.100.4"

Why: the per-address limit is worth nothing if the attacker names the address. Uvicorn,
which serves Streamlit, trusts `X-Forwarded-For` from 127.0.0.1 by default, so any local
process (or a proxy that passes the client's own header through) could claim 20 addresses
in 20 tries. app/main.py turns uvicorn's trust off (FORWARDED_ALLOW_IPS empty) and the
front door decides here instead:

- the key is the connecting peer's address, unless that peer is a proxy named in
  CALM_TRUSTED_PROXIES (addresses or networks, separated by commas);
- behind trusted proxies, `X-Forwarded-For` is read from the right: the first address that
  is not itself a trusted proxy is the client (entries to its left are the client's own
  claims and are never read);
- every key is a validated IP address in canonical form, so the limiter's table holds
  short keys only; an IPv6 client is keyed by its /64, the block one subscriber gets,
  since a single host can use every address in it;
- anything unparsable falls back to the peer itself, never to the header's text.

Trusting a proxy's address is not enough on a machine others share: any local process
reaches the studio's own port from 127.0.0.1, the proxy's address, and so could skip the
proxy's password and name any client. So a studio with CALM_TRUSTED_PROXIES also requires
CALM_PROXY_SECRET, which the proxy sends in PROXY_SECRET_HEADER on every request
(docs/proxy/nginx-studio.conf); a request without it is refused before anything is read,
and a studio with trusted proxies but no usable secret serves nothing (`proxy_refusal`).
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Mapping, Sequence

TRUSTED_PROXIES_ENV = "CALM_TRUSTED_PROXIES"
MAX_FORWARDED_CHARS = 2048  # a longer X-Forwarded-For is not read (a real chain of proxies is short)
IPV6_CLIENT_PREFIX = 64
PROXY_SECRET_ENV = "CALM_PROXY_SECRET"  # the value the proxy sends in PROXY_SECRET_HEADER
PROXY_SECRET_HEADER = "x-calm-proxy-secret"
MIN_PROXY_SECRET_CHARS = 16  # `openssl rand -hex 32` gives 64

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies(environ: Mapping[str, str]) -> tuple[Network, ...]:
    """The networks of CALM_TRUSTED_PROXIES; an entry that is not an address or network is
    skipped (a typo must not trust the world)."""
    found: list[Network] = []
    for part in environ.get(TRUSTED_PROXIES_ENV, "").split(","):
        try:
            found.append(ipaddress.ip_network(part.strip(), strict=False))
        except ValueError:
            continue
    return tuple(found)


def proxy_secret(environ: Mapping[str, str]) -> str | None:
    """CALM_PROXY_SECRET, stripped; None when unset or empty."""
    return environ.get(PROXY_SECRET_ENV, "").strip() or None


def proxy_refusal(proxies: Sequence[Network], secret: str | None) -> str | None:
    """Why a studio behind trusted proxies serves nothing (None: it serves, or trusts no
    proxy): without a secret only the proxy knows, any local process could pass for it."""
    if not proxies or (secret is not None and len(secret) >= MIN_PROXY_SECRET_CHARS):
        return None
    return (
        f"This studio trusts a proxy ({TRUSTED_PROXIES_ENV}) but has no {PROXY_SECRET_ENV} of at least "
        f"{MIN_PROXY_SECRET_CHARS} characters, so it serves nothing: set one (`openssl rand -hex 32`) here and "
        "in the proxy's configuration (docs/proxy/nginx-studio.conf)."
    )


def from_the_proxy(header_values: Sequence[str], secret: str | None) -> bool:
    """Whether a request carries the proxy's secret (exactly one value, compared in constant time)."""
    if secret is None or len(header_values) != 1:
        return False
    return hmac.compare_digest(header_values[0].strip().encode("utf-8"), secret.encode("utf-8"))


def client_key(peer: str | None, forwarded_for: Sequence[str], proxies: Sequence[Network]) -> str:
    """The address the limits count a request against (see the module docstring)."""
    peer_address = _address(peer)
    if peer_address is None:
        return "unknown"
    client = peer_address
    if _trusted(peer_address, proxies):
        for hop in reversed(_hops(forwarded_for)):
            address = _address(hop)
            if address is None:
                break  # a damaged entry: stop at the last address a trusted proxy vouched for
            client = address
            if not _trusted(address, proxies):
                break
    return _key(client)


def is_trusted_proxy(peer: str | None, proxies: Sequence[Network]) -> bool:
    """Whether the connecting peer is one of the proxies whose X-Forwarded-* headers are read."""
    address = _address(peer)
    return address is not None and _trusted(address, proxies)


def _hops(forwarded_for: Sequence[str]) -> list[str]:
    text = ",".join(forwarded_for)
    if len(text) > MAX_FORWARDED_CHARS:
        return []
    return [part.strip() for part in text.split(",") if part.strip()]


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text or len(text) > 64:
        return None
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address, proxies: Sequence[Network]) -> bool:
    return any(address.version == network.version and address in network for network in proxies)


def _key(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    if isinstance(address, ipaddress.IPv6Address) and not address.is_loopback:
        return str(ipaddress.ip_network(f"{address}/{IPV6_CLIENT_PREFIX}", strict=False))
    return str(address)
