"""A stand-in OpenAI-compatible server: `/v1/models` and `/v1/completions` answered from a
transformers model in a thread, in the format vLLM gives (echo, logprobs, top_logprobs,
logit_bias in the returned log-probabilities, as `--logprobs-mode processed_logprobs`).

    with StandIn(model_dir) as server:           # server.url: http://127.0.0.1:PORT/v1
        ...                                      # server.requests: the payloads it received

Knobs for the failure tests: `prompt_logprobs=False` answers echo with `logprobs: null`
(a server that has none), `fail_first=n` answers the first n completions with HTTP 503,
`honour_bias=False` leaves logit_bias out of the returned log-probabilities (vLLM's
default raw mode). Each sequence runs alone in float32, unpadded: the reference forward.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import torch


class StandIn:
    """The server and its model; a context manager that starts and stops the thread."""

    def __init__(self, model_dir: Path, *, prompt_logprobs: bool = True, fail_first: int = 0,
                 honour_bias: bool = True, name: str | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.name = name or str(model_dir)
        self.prompt_logprobs, self.fail_first, self.honour_bias = prompt_logprobs, fail_first, honour_bias
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self._server = HTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> "StandIn":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "max_model_len": 512}]}

    def complete(self, payload: dict[str, Any]) -> dict[str, Any]:
        prompts = payload["prompt"]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids = [self.tokenizer(p, add_special_tokens=False).input_ids if isinstance(p, str) else p for p in prompts]
        choices = [self._choice(i, seq, payload) for i, seq in enumerate(ids)]
        return {"id": "cmpl-standin", "object": "text_completion", "model": self.name, "choices": choices}

    @torch.no_grad()
    def _choice(self, index: int, ids: list[int], payload: dict[str, Any]) -> dict[str, Any]:
        logits = self.model(input_ids=torch.tensor([ids])).logits[0].double()  # (L, V)
        last = logits[-1].clone()
        if self.honour_bias:
            for token, bias in (payload.get("logit_bias") or {}).items():
                last[int(token)] += float(bias)
        last_lp = torch.log_softmax(last / float(payload.get("temperature") or 1.0), -1)
        generated = int(last_lp.argmax())
        n_top = int(payload.get("logprobs") or 0)
        top = {self._text(int(t)): float(last_lp[t]) for t in last_lp.topk(max(n_top, 1)).indices}
        logprobs = None
        if payload.get("logprobs") is not None:
            echo = bool(payload.get("echo"))
            prompt_lp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
            tokens = ([self._text(t) for t in ids] if echo else []) + [self._text(generated)]
            values = ([None] + prompt_lp.tolist() if echo else []) + [float(last_lp[generated])]
            tops = ([None] * len(ids) if echo else []) + [top]
            if echo and not self.prompt_logprobs:
                values, tops = [None] * len(ids) + values[-1:], tops
            logprobs = {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops}
        text = self._text(generated)
        echoed = self.tokenizer.decode(ids) if payload.get("echo") else ""
        return {"index": index, "text": echoed + text, "logprobs": logprobs, "finish_reason": "length"}

    def _text(self, token: int) -> str:
        return self.tokenizer.decode([token])


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._answer(200, standin.models()) if self.path == "/v1/models" else self._answer(404, {"error": "no"})

        def do_POST(self) -> None:  # noqa: N802
            payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/completions":
                return self._answer(404, {"error": {"message": f"no route {self.path}"}})
            standin.requests.append(payload)
            if standin.fail_first > 0:
                standin.fail_first -= 1
                return self._answer(503, {"error": {"message": "overloaded, try again"}})
            self._answer(200, standin.complete(payload))

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode("utf-8")
            standin.statuses.append(status)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
