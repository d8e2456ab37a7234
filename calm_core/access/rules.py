"""Who may use the studio, and what it may touch: the local and the shared mode.

    access = access_from(os.environ, server_address="127.0.0.1")   # Access(shared=False, ...)
    check_password(typed, access.password)        # constant-time
    model = confine_model_name(typed, access)     # a refused path raises PathRefused (one line)

Why two modes: the studio holds uploaded domain data (medical or legal work, a class's
quiz) and can launch jobs and open local files, so anyone who reaches it can do all of
that. The tools researchers already trust set the bar (Jupyter, TensorBoard, MLflow
listen on loopback; Gradio's share links take `auth=`):

- **local** (the default): the studio listens on 127.0.0.1 (.streamlit/config.toml), so
  only this machine reaches it, and it keeps full freedom: any model directory, any
  number of queued runs, any run may be cancelled;
- **shared**: `bash scripts/studio.sh --share` (CALM_STUDIO_SHARED=1, every interface),
  or any `server.address` that is not loopback. Every page sits behind a password
  (CALM_STUDIO_PASSWORD or the `password` of Streamlit secrets; without one the studio
  refuses to serve), a model path typed into the studio must lie under an allowed root
  (the workspace, the model cache, CALM_ALLOWED_ROOTS) and a hub id must be one the
  operator lists (CALM_SHARED_HUB_REPOS; only those jobs get the operator's hub token), a session may hold at most
  MAX_QUEUED_PER_SESSION queued or running runs (a resume counts, as a launch does), a
  run may have at most CALM_SHARED_MAX_STEPS steps, one browser (all its sessions) at most
  MAX_QUEUED_PER_BROWSER runs, the server at most CALM_SHARED_MAX_RUNS, and a session may cancel or resume only
  the runs it launched and delete only the uploads and splits it saved, unless it is the
  admin's (CALM_STUDIO_ADMIN=1 on the server).

In both modes a typed path that can name no file (a NUL byte, a control character, more
than MAX_PATH_CHARS characters) is refused with one line, never a traceback.

Pure functions of the environment and their arguments; the pages (app/main.py gate,
app/pages/train/train.py, app/pages/monitor/monitor.py) call them. docs/security.md says what is and
is not protected.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from calm_core.paths import PROJECT_ROOT, cache_dir, inside, malformed_path, workspace_dir

PASSWORD_ENV = "CALM_STUDIO_PASSWORD"
SHARED_ENV = "CALM_STUDIO_SHARED"
ADMIN_ENV = "CALM_STUDIO_ADMIN"
ROOTS_ENV = "CALM_ALLOWED_ROOTS"  # extra roots, separated by os.pathsep (":" on Linux)
SECRETS_KEY = "password"  # .streamlit/secrets.toml: password = "..."
SHORT_PASSWORD_ENV = "CALM_STUDIO_ALLOW_SHORT_PASSWORD"  # a classroom's override of MIN_PASSWORD_LENGTH
MIN_PASSWORD_LENGTH = 12  # with the guessing limits (access/guesses.py), out of reach of guessing
MAX_QUEUED_PER_SESSION = 3  # queued or running runs one shared session may hold at once
MAX_QUEUED_PER_BROWSER = 3  # the same across every session of one signed-in browser (its device id)
MAX_RUNS_ENV = "CALM_SHARED_MAX_RUNS"  # queued or running runs a shared studio holds at once, all browsers
DEFAULT_MAX_RUNS = 8  # one job slot by default: 8 quick runs queue about 10 minutes of work
MAX_STEPS_ENV = "CALM_SHARED_MAX_STEPS"  # the most steps one run may have in a shared studio
DEFAULT_MAX_STEPS = 1000  # the quick preset's 40 steps take about a minute; 1000, about half an hour
MAX_EVAL_ITEMS_ENV = "CALM_SHARED_MAX_EVAL_ITEMS"  # the most items one added evaluation may score
DEFAULT_MAX_EVAL_ITEMS = 2000  # about the final evaluation of a quick run on four sets of 500
HUB_REPOS_ENV = "CALM_SHARED_HUB_REPOS"  # hub repos a shared user may name, commas; the operator's token goes with them
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
HOW_TO_SET = (
    f"Set a password first: `export {PASSWORD_ENV}=...` before `bash scripts/studio.sh --share`, or "
    f'`{SECRETS_KEY} = "..."` in .streamlit/secrets.toml (kept out of git).'
)


class Refused(ValueError):
    """Something the studio will not do for this session (a launch or resume over the quota
    or the step budget, another session's dataset deleted); the message is one line for
    the page."""


class PathRefused(Refused):
    """A path the studio will not open; the message is one line for the page."""


@dataclass(frozen=True)
class Access:
    """The studio's mode as the server was started."""

    shared: bool = False
    password: str | None = field(default=None, repr=False)  # never printed, logged or stored
    admin: bool = False
    roots: tuple[Path, ...] = ()
    short_password_ok: bool = False
    max_steps: int = DEFAULT_MAX_STEPS  # shared only: the most steps one run may have
    max_runs: int = DEFAULT_MAX_RUNS  # shared only: queued or running runs on the whole server
    max_eval_items: int = DEFAULT_MAX_EVAL_ITEMS  # shared only: items one added evaluation may score
    hub_repos: tuple[str, ...] = ()  # shared only: the hub repos its users may name (CALM_SHARED_HUB_REPOS)

    @property
    def refusal(self) -> str | None:
        """Why a shared studio serves nothing (None: it serves): no password, or one shorter
        than MIN_PASSWORD_LENGTH without the classroom override."""
        if not self.shared:
            return None
        if not self.password:
            return "This studio is shared but has no password, so it serves nothing. " + HOW_TO_SET
        if len(self.password) < MIN_PASSWORD_LENGTH and not self.short_password_ok:
            return (
                f"This studio is shared with a password shorter than {MIN_PASSWORD_LENGTH} characters, so it serves "
                f"nothing: choose a longer one, or, for a classroom on a network you trust, start it with "
                f"{SHORT_PASSWORD_ENV}=1 (`bash scripts/studio.sh --share --allow-short-password`)."
            )
        return None

    @property
    def refuses_to_serve(self) -> bool:
        """Shared without a usable password: the studio says why (`refusal`) and nothing else."""
        return self.refusal is not None


def is_loopback(address: str | None) -> bool:
    """Whether a `server.address` keeps the studio on this machine (unset: Streamlit
    listens on every interface, so it is not)."""
    if not address:
        return False
    return address in LOOPBACK or address.startswith("127.")


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def access_from(environ: Mapping[str, str], server_address: str | None, secrets_password: str | None = None) -> Access:
    """The mode from the server's environment and address: shared when asked for
    (CALM_STUDIO_SHARED) or when the studio listens beyond loopback anyway. The password
    comes from CALM_STUDIO_PASSWORD, else from Streamlit secrets."""
    shared = _flag(environ, SHARED_ENV) or not is_loopback(server_address)
    password = environ.get(PASSWORD_ENV) or secrets_password or None
    return Access(
        shared=shared,
        password=password,
        admin=_flag(environ, ADMIN_ENV),
        roots=allowed_roots(environ),
        short_password_ok=_flag(environ, SHORT_PASSWORD_ENV),
        max_steps=max_steps_from(environ),
        max_runs=_positive(environ, MAX_RUNS_ENV, DEFAULT_MAX_RUNS),
        max_eval_items=_positive(environ, MAX_EVAL_ITEMS_ENV, DEFAULT_MAX_EVAL_ITEMS),
        hub_repos=tuple(r.strip() for r in environ.get(HUB_REPOS_ENV, "").split(",") if _HUB_ID.match(r.strip())),
    )


def max_steps_from(environ: Mapping[str, str]) -> int:
    """CALM_SHARED_MAX_STEPS, a positive whole number; unset or anything else gives
    DEFAULT_MAX_STEPS (a typo must not lift the budget)."""
    return _positive(environ, MAX_STEPS_ENV, DEFAULT_MAX_STEPS)


def _positive(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() and int(raw) > 0 else default


@dataclass(frozen=True)
class ActiveRuns:
    """Queued or running runs a launch is counted against: this session's, this browser's
    (every session of one signed-in browser), the whole server's; and, in words, when the
    soonest slot should free (for the refusal)."""

    session: int = 0
    browser: int = 0
    server: int = 0
    frees: str = ""


def _as_active(active: int | ActiveRuns) -> ActiveRuns:
    return active if isinstance(active, ActiveRuns) else ActiveRuns(session=active)


def budget_refusal(access: Access, active: int | ActiveRuns) -> str | None:
    """Why one more queued run is refused (None: it may queue): the session's quota, then
    the browser's across its sessions (a new tab is free, so a per-session quota alone is
    none), then the server's, which says when a slot frees."""
    counts = _as_active(active)
    if quota_left(access, counts.session) == 0:
        return quota_message(counts.session)
    if not access.shared:
        return None
    if counts.browser >= MAX_QUEUED_PER_BROWSER:
        return (
            f"This browser already has {counts.browser} queued or running runs across its sessions, the most a shared "
            f"studio allows ({MAX_QUEUED_PER_BROWSER}). Wait for one to finish or cancel one on the Monitor page."
        )
    if counts.server >= access.max_runs:
        frees = f" {counts.frees}" if counts.frees else ""
        return (
            f"The studio already holds {counts.server} queued or running runs, the most it allows at once "
            f"({access.max_runs}, {MAX_RUNS_ENV} on the server): try again when one ends.{frees}"
        )
    return None


def main() -> None:
    """`python -m calm_core.access.rules`: exit 2 with the reason when a studio started
    with this environment in shared mode would serve nothing (scripts/studio.sh --share asks)."""
    refusal = access_from({**os.environ, SHARED_ENV: "1"}, "0.0.0.0", _secrets_file_password()).refusal
    if refusal:
        print(f"calm studio: {refusal}", file=sys.stderr)
        raise SystemExit(2)


def _secrets_file_password() -> str | None:
    """The `password` of .streamlit/secrets.toml (the project's, then the user's), as Streamlit reads it."""
    for path in (PROJECT_ROOT / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"):
        try:
            value = tomllib.loads(path.read_text(encoding="utf-8")).get(SECRETS_KEY)
        except (OSError, ValueError):
            continue
        if value:
            return str(value)
    return None


def check_password(given: str | None, expected: str | None) -> bool:
    """Constant-time comparison (hmac.compare_digest): the time taken does not tell how
    much of a guess was right. Nothing matches an unset password."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def allowed_roots(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The folders a shared studio may open: the workspace, the model cache and every
    entry of CALM_ALLOWED_ROOTS, resolved (symlinks followed)."""
    extra = [Path(p).expanduser() for p in environ.get(ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return tuple(dict.fromkeys(p.resolve() for p in (workspace_dir(), cache_dir(), *extra)))


def confine(text: str, roots: Iterable[Path]) -> Path:
    """`text` as a path under one of `roots`, else PathRefused: `..` anywhere, and any
    path (absolute, or relative to the studio's folder) whose real location — symlinks
    followed — is outside every root; also a path that can name no file (`check_typed_path`)
    or that cannot be resolved (a symlink loop, a name too long for the file system)."""
    raw = Path(check_typed_path(text)).expanduser()
    if ".." in raw.parts:
        raise PathRefused(f"Refused {text!r}: `..` is not allowed in a shared studio")
    try:
        real = (raw if raw.is_absolute() else PROJECT_ROOT / raw).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise PathRefused(f"Refused {text!r}: it cannot be resolved ({exc.__class__.__name__})") from None
    if any(inside(root, real) for root in roots):
        return real
    raise PathRefused(
        f"Refused {text!r}: a shared studio opens paths only under the workspace, the model cache and {ROOTS_ENV}"
    )


def confine_model_name(text: str, access: Access) -> str:
    """The Train page's model field: as typed in local mode; in shared mode a named model,
    a hub id (`org/name`, not a path on this machine) or a path under an allowed root.
    In both modes text that can name no file is refused (`check_typed_path`)."""
    from calm_core.scoring.models import named_model

    name = check_typed_path(text)
    if not access.shared or name == "" or named_model(name):
        return name
    if _HUB_ID.match(name) and not _exists(PROJECT_ROOT / name):
        if access.admin or name in access.hub_repos:
            return name
        raise PathRefused(
            f"Refused {name!r}: a shared studio downloads only the hub repos its operator lists ({HUB_REPOS_ENV})"
        )
    return str(confine(name, access.roots))


def operator_credentials(access: Access, model: str) -> bool:
    """Whether a job this session launches may use the operator's hub token (HF_TOKEN, the
    token file): local, the admin's, or a repo the operator listed. Otherwise a hub id a
    shared user typed would download private or gated repos as the operator."""
    return not access.shared or access.admin or model in access.hub_repos


def check_typed_path(text: str) -> str:
    """`text` stripped, or PathRefused with one line when it can name no file
    (paths.malformed_path: a NUL byte, a control character, an overlong value). The
    message does not repeat the text: it may be megabytes, or hold escape sequences."""
    name = text.strip()
    reason = malformed_path(name)
    if reason:
        raise PathRefused(f"Refused this path: {reason}.")
    return name


def _exists(path: Path) -> bool:
    """Path.exists without its OSError (a component longer than the file system allows)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def session_tag(session_id: str) -> str:
    """The opaque id a run records for the session that launched it: a hash, so the
    run files hold no live session token and no address."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:16]


def may_cancel(access: Access, session: str | None, launched_by: str | None) -> bool:
    """Local: anyone. Shared: the session that launched the run, or the admin's."""
    return not access.shared or access.admin or (session is not None and session == launched_by)


OWNER_ONLY = "Another session launched this run: only it (or the studio's admin) can cancel or resume it."
OWNER_WRITES = (
    "Another session launched this run: only it (or the studio's admin) can add results to it or save a "
    "threshold with it. Reading it stays open."
)


def write_refusal(access: Access, session: str | None, launched_by: str | None) -> str | None:
    """Why this session may not write into a run (added results, a saved threshold), None if
    it may: the cancel rule. Otherwise any session could put rows, or a threshold and its
    guarantee, into another's export and model card."""
    return None if may_cancel(access, session, launched_by) else OWNER_WRITES


def eval_items_refusal(access: Access, items: int | None) -> str | None:
    """Why an evaluation of `items` items may not be queued in a shared studio (None: it may):
    an unknown count (a set whose size only loading tells) or more than `max_eval_items`."""
    if not access.shared:
        return None
    if items is None:
        return "The size of a chosen set is known only once it is loaded: set the items per set."
    if items > access.max_eval_items:
        return (
            f"This evaluation has {items} items, more than the {access.max_eval_items} a shared studio allows at "
            f"once ({MAX_EVAL_ITEMS_ENV} on the server): lower the items per set."
        )
    return None


def resume_refusal(
    access: Access, session: str | None, launched_by: str | None, active: int | ActiveRuns
) -> str | None:
    """Why this session may not resume a run (None: it may). Resuming puts the run back in
    the queue, so it counts toward the quota as a launch does: without this, a session
    could cancel its run, launch three more and resume the first (4 active). `active`:
    the session's queued or running runs (the run to resume, stopped, is not one)."""
    if not may_cancel(access, session, launched_by):
        return OWNER_ONLY
    return budget_refusal(access, active)


def steps_refusal(access: Access, steps: int) -> str | None:
    """Why a run of `steps` steps may not be launched (None: it may): a shared studio runs
    at most `Access.max_steps` per run (CALM_SHARED_MAX_STEPS), so one session cannot
    hold the only job slot for hours (jobs run one at a time by default)."""
    if not access.shared or steps <= access.max_steps:
        return None
    return (
        f"This run has {steps} steps, more than the {access.max_steps} a shared studio allows per run "
        f"({MAX_STEPS_ENV} on the server): lower the steps under Advanced settings."
    )


def launch_refusal(access: Access, steps: int, active: int | ActiveRuns) -> str | None:
    """Why this session may not launch a run of `steps` steps now (None: it may): the
    quotas of queued or running runs (session, browser, server), then the step budget."""
    return budget_refusal(access, active) or steps_refusal(access, steps)


def may_delete(access: Access, session: str | None, owner: str | None) -> bool:
    """Deleting (or replacing) an upload or a split follows the cancel rule: local, anyone;
    shared, the session that saved it or the admin's. One saved before owners were
    recorded (`owner` None) is the admin's alone in a shared studio."""
    return may_cancel(access, session, owner)


def delete_refusal(access: Access, session: str | None, owner: str | None) -> str | None:
    """Why this session may not delete or replace a dataset (None: it may)."""
    if may_delete(access, session, owner):
        return None
    if owner is None:
        return (
            "This dataset was saved before the studio recorded who saved what: in a shared studio only the "
            f"admin ({ADMIN_ENV}=1 on the server) can delete or replace it."
        )
    return "Another session saved this dataset: only it (or the studio's admin) can delete or replace it."


def quota_left(access: Access, active_runs_of_session: int) -> int | None:
    """Runs this session may still queue (None: no limit, local mode)."""
    if not access.shared:
        return None
    return max(0, MAX_QUEUED_PER_SESSION - active_runs_of_session)


def quota_message(active: int) -> str:
    return (
        f"This session already has {active} queued or running runs, the most a shared studio allows "
        f"({MAX_QUEUED_PER_SESSION}). Wait for one to finish or cancel one on the Monitor page."
    )


if __name__ == "__main__":
    main()
