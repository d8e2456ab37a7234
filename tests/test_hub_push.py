"""calm export --push-to-hub: the folder uploaded through huggingface_hub, against a local
stand-in for the Hub API (no network).

The stand-in answers the endpoints create_repo + upload_folder call (repos/create,
validate-yaml for README.md, preupload, commit: an NDJSON body whose files come base64-encoded) and keeps what it was
sent, so a test reads back the repo's visibility and every file's bytes. Any other POST is
recorded and answered 404, so a new write shows up as a failure here; a GET is answered
404 (huggingface_hub reads its agent registry best-effort and goes on without it).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from calm_core.export.hub_push import push_folder


class HubStandIn(BaseHTTPRequestHandler):
    repos: dict[str, dict] = {}
    unknown: list[str] = []
    tokens: list[str] = []
    cards: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.tokens.append(self.headers.get("Authorization", ""))
        host = f"http://{self.headers['Host']}"
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["api", "validate-yaml"]:  # the card's metadata, as the Hub checks it before a commit
            self.cards.append(json.loads(body)["content"])
            return self._reply(200, {"errors": [], "warnings": []})
        if parts[:3] == ["api", "repos", "create"]:
            payload = json.loads(body)
            repo_id = f"{payload['organization']}/{payload['name']}"
            self.repos.setdefault(repo_id, {"visibility": payload.get("visibility"), "files": {}})
            return self._reply(200, {"url": f"{host}/{repo_id}", "name": repo_id})
        if parts[:2] == ["api", "models"] and parts[4:5] == ["preupload"]:
            files = json.loads(body)["files"]
            return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                               for f in files], "commitOid": "0" * 40})
        if parts[:2] == ["api", "models"] and parts[4:5] == ["commit"]:
            repo_id = "/".join(parts[2:4])
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            for line in lines:
                if line["key"] == "file":
                    value = line["value"]
                    self.repos[repo_id]["files"][value["path"]] = base64.b64decode(value["content"])
                if line["key"] == "header":
                    self.repos[repo_id]["message"] = line["value"]["summary"]
            oid = hashlib.sha1(body).hexdigest()
            return self._reply(200, {"commitUrl": f"{host}/{repo_id}/commit/{oid}", "commitOid": oid,
                                     "pullRequestUrl": None})
        self.unknown.append(f"POST {self.path}")
        return self._reply(404, {"error": "not in the stand-in"})

    def do_GET(self) -> None:  # noqa: N802 - best-effort reads only (huggingface_hub's agent registry): not found
        self._reply(404, {"error": "not in the stand-in"})


@pytest.fixture()
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    HubStandIn.repos, HubStandIn.unknown, HubStandIn.tokens, HubStandIn.cards = {}, [], [], []
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)  # read at import: the environment is too late
    monkeypatch.setenv("HF_TOKEN", "hf_standin_token")
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    registry = tmp_path_factory.mktemp("hf-home") / ".agent_harnesses.json"
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(registry))  # its cache file, not the home's
    yield HubStandIn
    server.shutdown()
    server.server_close()


def _folder(root: Path) -> Path:
    folder = root / "export"
    folder.mkdir()
    (folder / "calm_export.json").write_text(json.dumps({"run_id": "r1", "step": 2, "variant": "calm"}))
    (folder / "README.md").write_text("---\nlibrary_name: peft\n---\n\n# r1\n")
    (folder / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 4)
    return folder


def test_push_creates_a_private_repo_and_uploads_every_file(hub, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    url = push_folder(folder, "me/calm-r1")
    assert url.endswith("/me/calm-r1") and not hub.unknown
    repo = hub.repos["me/calm-r1"]
    assert repo["visibility"] == "private"  # private unless asked
    assert repo["files"] == {p.name: p.read_bytes() for p in folder.iterdir()}
    assert repo["message"] == "CALM Studio export: r1 step 2 (calm)"
    assert hub.cards == [(folder / "README.md").read_text()]  # the card's metadata was checked before the commit
    assert all(token == "Bearer hf_standin_token" for token in hub.tokens)  # HF_TOKEN, as the Hub's clients read it


def test_push_public_only_when_asked(hub, tmp_path: Path) -> None:
    push_folder(_folder(tmp_path), "me/open", private=False)
    assert hub.repos["me/open"]["visibility"] == "public"


def test_push_refuses_a_bad_repo_id_and_a_missing_token(hub, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ValueError, match="repo id like `me/my-model`, but got 'no spaces/in here'"):
        push_folder(_folder(tmp_path), "no spaces/in here")
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no stored login either
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    with pytest.raises(ValueError, match="Hugging Face token"):
        push_folder(tmp_path / "export", "me/x")
    assert not hub.repos


def test_calm_export_push_to_hub_from_the_command_line(hub, tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """`calm export RUN DIR --push-to-hub REPO`: the folder written, then pushed private."""
    from calm_core.cli import main
    from tests.test_export import _fake_run

    run = _fake_run(tmp_path / "runs", tiny_model_dir, str(tiny_model_dir))
    code = main(["export", run.run_id, str(tmp_path / "out"), "--runs-root", str(tmp_path / "runs"),
                 "--push-to-hub", "me/fake"])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "pushed to" in out and "(private)" in out
    files = hub.repos["me/fake"]["files"]
    assert set(files) == {p.name for p in (tmp_path / "out").iterdir()} and "README.md" in files
    assert main(["export", run.run_id, str(tmp_path / "out2"), "--runs-root", str(tmp_path / "runs"),
                 "--public"]) != 0  # --public without a repo is refused
