"""How fast anyone may guess a shared studio's password: per client address and per server.

    limiter = GuessLimiter()
    wait = limiter.wait_before("203.0.113.7", now)   # 0.0: the password may be checked now
    limiter.record("203.0.113.7", ok=False, now=now)

Why both: a delay per browser session is no limit, since a new session is free (a probe
that opened a fresh session per try found a one-letter password within a few dozen tries). So a try
is counted against the address it came from and against the whole server:

- **per address**: FREE_TRIES wrong passwords, then each further try must wait 1, 2, 4,
  ... seconds after the last wrong one (at most MAX_DELAY_S); LOCKOUT_AFTER wrong tries
  within WINDOW_S lock the address out until that window has passed. A right password
  clears the address.
- **per server**: wrong tries from all addresses together spend a bucket of SERVER_BURST
  tokens that refills at SERVER_PER_HOUR an hour, so many addresses (a botnet, or every
  client behind one proxy) cannot multiply the rate.

A try that arrives too early is refused without looking at the password, so parallel
requests gain nothing. The cost: while someone guesses, the right password from the same
address waits too, and an emptied server bucket makes everyone wait (at most one
refill). `python -m calm_core.access.guesses` prints the guesses these limits allow;
docs/security.md quotes that table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FREE_TRIES = 5
BASE_DELAY_S = 1.0
MAX_DELAY_S = 60.0
LOCKOUT_AFTER = 10
WINDOW_S = 3600.0
SERVER_BURST = 30
SERVER_PER_HOUR = 60.0
NEWCOMER_BURST = 10  # first tries of browsers new to the studio (a form cookie each), apart from the flood's
NEWCOMER_PER_HOUR = 30.0
MAX_TRACKED = 10_000  # keys with failures kept at once: about 1 MB; past it the oldest go first


def backoff(
    failures: int, free_tries: int = FREE_TRIES, base_s: float = BASE_DELAY_S, cap_s: float = MAX_DELAY_S
) -> float:
    """Seconds to wait after `failures` wrong passwords: none for the first `free_tries`,
    then base, 2 x base, 4 x base ... up to `cap_s`. The one back-off of the studio: the
    door's limiter and the in-app gate's fallback both use it."""
    if failures < free_tries:
        return 0.0
    return min(cap_s, base_s * 2.0 ** (failures - free_tries))


@dataclass
class _Address:
    failures: list[float] = field(default_factory=list)  # times of wrong tries inside the window


@dataclass
class GuessLimiter:
    """The state of one server's limits; every method takes the time (seconds, monotonic).

    `key` is what a try is counted against: a client address (access/clients.py), or a
    browser that has signed in before (`known_device`), whose tries are counted against
    that browser alone: the server-wide bucket and failures sent under its address do not
    hold it back, so nobody can lock the rightful user out. Only keys with failures inside
    the window have an entry, and at most `max_tracked` are kept (the oldest dropped
    first), so the table stays bounded however many addresses ask."""

    free_tries: int = FREE_TRIES
    base_delay_s: float = BASE_DELAY_S
    max_delay_s: float = MAX_DELAY_S
    lockout_after: int = LOCKOUT_AFTER
    window_s: float = WINDOW_S
    server_burst: int = SERVER_BURST
    server_per_hour: float = SERVER_PER_HOUR
    max_tracked: int = MAX_TRACKED
    _addresses: dict[str, _Address] = field(default_factory=dict, repr=False)
    _tokens: float | None = field(default=None, repr=False)
    _tokens_at: float = field(default=0.0, repr=False)
    newcomers: Bucket = field(default_factory=lambda: Bucket(NEWCOMER_BURST, NEWCOMER_PER_HOUR))

    def newcomer_wait(self, form: str, address: str, now: float) -> float | None:
        """Seconds until the first try of the browser holding form cookie `form` may be checked
        under the newcomers' own allowance, not the server's bucket; None when that form has
        tried before (its later tries count as any other). Its address's own limits still
        apply, so a flood from elsewhere, which empties the server's bucket, does not hold it
        back; a flood that fetches a form per try spends `newcomers` instead, at most
        NEWCOMER_BURST + NEWCOMER_PER_HOUR guesses an hour on top of the server's."""
        if self._recent(form, now):
            return None
        return max(self._key_wait(address, now), self.newcomers.wait(now))

    def record_newcomer(self, form: str, address: str, ok: bool, now: float) -> None:
        """Count a newcomer's checked first try: a wrong one against its form, its address and
        the newcomers' bucket (not the server's)."""
        if ok:
            self._addresses.pop(address, None)
            return
        for key in (form, address):
            self._addresses[key] = _Address([*self._recent(key, now), now])
        self._bound(now)
        self.newcomers.spend(now)

    def wait_before(self, key: str, now: float, known_device: bool = False) -> float:
        """Seconds until `key` may try a password (0.0: now)."""
        own = self._key_wait(key, now)
        return own if known_device else max(own, self._server_wait(now))

    def record(self, key: str, ok: bool, now: float, known_device: bool = False) -> None:
        """Count a checked try: a right one clears the key, a wrong one counts against the key
        and (unless from a known device) the server."""
        if ok:
            self._addresses.pop(key, None)
            return
        failures = self._recent(key, now)
        self._addresses[key] = _Address([*failures, now])
        self._bound(now)
        if not known_device:
            self._refill(now)
            self._tokens = max(0.0, (self._tokens or 0.0) - 1.0)

    def tracked(self) -> int:
        """How many keys have an entry now (the table's size)."""
        return len(self._addresses)

    def delay_after(self, failures: int) -> float:
        """The wait after the `failures`-th wrong try in the window (lockout excluded)."""
        return backoff(failures, self.free_tries, self.base_delay_s, self.max_delay_s)

    def _recent(self, key: str, now: float) -> list[float]:
        """The key's failures inside the window; an entry whose failures have all aged out is
        dropped, and asking about a key never creates one."""
        state = self._addresses.get(key)
        if state is None:
            return []
        state.failures = [t for t in state.failures if now - t < self.window_s]
        if not state.failures:
            del self._addresses[key]
        return state.failures

    def _bound(self, now: float) -> None:
        """Keep at most max_tracked entries: drop the aged-out ones, then the least recent."""
        if len(self._addresses) <= self.max_tracked:
            return
        for key in list(self._addresses):
            self._recent(key, now)
        excess = len(self._addresses) - self.max_tracked
        if excess > 0:
            oldest = sorted(self._addresses, key=lambda k: self._addresses[k].failures[-1])[:excess]
            for key in oldest:
                del self._addresses[key]

    def _key_wait(self, key: str, now: float) -> float:
        failures = self._recent(key, now)
        if not failures:
            return 0.0
        if len(failures) >= self.lockout_after:
            return max(0.0, failures[0] + self.window_s - now)
        return max(0.0, failures[-1] + self.delay_after(len(failures)) - now)

    def _refill(self, now: float) -> None:
        if self._tokens is None:
            self._tokens, self._tokens_at = float(self.server_burst), now
            return
        rate = self.server_per_hour / 3600.0
        self._tokens = min(float(self.server_burst), self._tokens + (now - self._tokens_at) * rate)
        self._tokens_at = now

    def _server_wait(self, now: float) -> float:
        self._refill(now)
        assert self._tokens is not None
        if self._tokens >= 1.0:
            return 0.0
        return (1.0 - self._tokens) * 3600.0 / self.server_per_hour


@dataclass
class Bucket:
    """A token bucket: `burst` tries at once, refilled at `per_hour` (times in seconds)."""

    burst: int
    per_hour: float
    _level: float | None = field(default=None, repr=False)
    _at: float = field(default=0.0, repr=False)

    def wait(self, now: float) -> float:
        """Seconds until one try may be spent (0.0: now)."""
        level = self._refilled(now)
        return 0.0 if level >= 1.0 else (1.0 - level) * 3600.0 / self.per_hour

    def spend(self, now: float) -> None:
        self._level = max(0.0, self._refilled(now) - 1.0)

    def _refilled(self, now: float) -> float:
        level = float(self.burst) if self._level is None else self._level + (now - self._at) * self.per_hour / 3600.0
        self._level, self._at = min(float(self.burst), level), now
        return self._level


def fastest_guesses(limiter: GuessLimiter, addresses: int, guesses: int) -> float:
    """Seconds an attacker with `addresses` client addresses needs for `guesses` wrong
    tries under `limiter`, trying each address as soon as it is allowed (a simulation of
    the limits themselves, so the figure follows any change of them)."""
    now, done = 0.0, 0
    names = [f"attacker-{i}" for i in range(addresses)]
    while done < guesses:
        waits = [(limiter.wait_before(name, now), name) for name in names]
        wait, name = min(waits)
        now += wait
        limiter.record(name, ok=False, now=now)
        done += 1
    return now


def guesses_within(limiter: GuessLimiter, addresses: int, seconds: float) -> int:
    """How many wrong tries fit in `seconds` (the count after the first one at 0)."""
    now, done = 0.0, 0
    names = [f"attacker-{i}" for i in range(addresses)]
    while True:
        wait, name = min((limiter.wait_before(n, now), n) for n in names)
        if now + wait > seconds:
            return done
        now += wait
        limiter.record(name, ok=False, now=now)
        done += 1


def _table() -> list[tuple[str, str]]:
    hour, day = 3600.0, 86400.0
    rows = []
    for addresses in (1, 10, 1000):
        first = guesses_within(GuessLimiter(), addresses, hour)
        per_day = guesses_within(GuessLimiter(), addresses, day)
        sixty = fastest_guesses(GuessLimiter(), addresses, 60)
        rows.append(
            (
                f"{addresses} address{'es' if addresses > 1 else ''}",
                f"{first} in the first hour, {per_day} in a day; 60 guesses take {_duration(sixty)}",
            )
        )
    return rows


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def main() -> None:
    """Print the guesses the limits allow (docs/security.md quotes it)."""
    print(
        f"limits: {FREE_TRIES} free tries per address, then waits doubling from {BASE_DELAY_S:.0f} s up to "
        f"{MAX_DELAY_S:.0f} s, lockout after {LOCKOUT_AFTER} wrong tries in {WINDOW_S / 3600:.0f} h; server bucket "
        f"{SERVER_BURST}, refilled at {SERVER_PER_HOUR:.0f} an hour"
    )
    for who, allowed in _table():
        print(f"  {who:>15}: {allowed}")
    print(f"  a 12-character password of lower-case letters alone: 26^12 = 10^{12 * math.log10(26):.1f} candidates")


if __name__ == "__main__":
    main()
