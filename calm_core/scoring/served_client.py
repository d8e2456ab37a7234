"""An OpenAI-compatible completions server, spoken to with the standard library: the one
place that sends HTTP requests for `calm eval --model openai:URL` (`scoring.served`).

    client = CompletionsClient("http://127.0.0.1:8000/v1")
    client.served_models()                       # GET /v1/models: [(id, max_model_len or None)]
    client.complete({"prompt": [[1, 2, 3]], "echo": True, "logprobs": 1, "max_tokens": 1})

Why its own retries: a batch of scoring requests runs for minutes against a server that
is also serving others, and a 503 (overloaded, still loading), a 429 or a reset
connection is the server's weather, not an answer: such a request is sent again after
`backoff * 2**attempt` seconds, up to `retries` times. A 4xx other than 429 is the
request's fault and is raised at once, with the server's own words. Every request has a
timeout. The URL is the one the person typed; nothing here follows a redirect to another
host or fetches anything else.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from calm_core.scoring.named_models import ModelLoadError

TRANSIENT_STATUS = (429, 500, 502, 503, 504)  # overloaded, restarting or rate-limited: try again later
_ERROR_TEXT = 300  # characters of a server's error body quoted in a message


class ServedModelError(ModelLoadError):
    """A served model that cannot score: unreachable, refusing, or answering without
    what scoring needs. The message says what to do (`calm` prints it in one line)."""


@dataclass(frozen=True)
class CompletionsClient:
    """POSTs to `<base_url>/completions` of one server, with a timeout and retries."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1 (no trailing /completions)
    timeout: float = 120.0  # seconds per request: a batch of long prompts on a busy server
    retries: int = 4  # extra attempts after a transient failure (TRANSIENT_STATUS, a reset connection)
    backoff: float = 0.5  # seconds before the first retry; doubled each time
    api_key: str | None = None  # sent as a bearer token when given (OPENAI_API_KEY)

    def served_models(self) -> list[tuple[str, int | None]]:
        """(id, context length where the server says it: vLLM's `max_model_len`) per served model."""
        answer = self._send("GET", "/models", None)
        rows = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(rows, list):
            raise ServedModelError(
                f"Expected {self.base_url}/models to list the served models, but got {answer!r:.200}"
            )
        return [(str(row.get("id")), _int_or_none(row.get("max_model_len"))) for row in rows if isinstance(row, dict)]

    def complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One /completions request's JSON answer (retried while the failure is transient)."""
        answer = self._send("POST", "/completions", payload)
        if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
            raise ServedModelError(f"Expected a completions answer with `choices`, but got {answer!r:.200}")
        return answer

    def _send(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        for attempt in range(self.retries + 1):
            try:
                return self._once(method, path, payload)
            except _Transient as exc:
                if attempt == self.retries:
                    raise ServedModelError(
                        f"{self.base_url}{path} kept failing after {self.retries + 1} attempts ({exc}): "
                        "is the server up and not overloaded?"
                    ) from None
                time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _once(self, method: str, path: str, payload: dict[str, Any] | None) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(self.base_url.rstrip("/") + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.api_key:
            request.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (the typed URL)
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace")[:_ERROR_TEXT]
            if exc.code in TRANSIENT_STATUS:
                raise _Transient(f"HTTP {exc.code}") from None
            raise ServedModelError(f"{self.base_url}{path} answered HTTP {exc.code}: {body}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise _Transient(str(getattr(exc, "reason", exc))) from None
        except json.JSONDecodeError as exc:
            raise ServedModelError(f"{self.base_url}{path} answered something that is not JSON ({exc})") from None


class _Transient(Exception):
    """A failure worth another attempt (TRANSIENT_STATUS, a refused or reset connection, a timeout)."""


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
