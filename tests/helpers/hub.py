"""A Hugging Face hub on loopback for the tests: what huggingface_hub (2.4) asks under
HF_ENDPOINT=http://127.0.0.1:PORT, answered from repositories the tests publish, every request recorded.

    GET  /api/models/{repo}/revision/{revision}   HfApi.model_info: {"id", "sha", "siblings": [{"rfilename"}], ...}
    HEAD /{repo}/resolve/{revision}/{path}        hf_hub_download's metadata: X-Repo-Commit, ETag, Content-Length,
                                                  and for a weight file (an LFS file on the hub) X-Linked-Etag (its
                                                  sha256) and X-Linked-Size
    GET  /{repo}/resolve/{revision}/{path}        the file; `Range: bytes=N-` (a resumed download) gets 206 and the rest

Refusals as the hub says them, by X-Error-Code (huggingface_hub raises by it): RepoNotFound (404: an unknown
repository, or any other path, such as huggingface_hub's /api/agent-harnesses), GatedRepo (401: a gated
repository's file asked without a token; its model_info answers, as the hub's does), RevisionNotFound (404),
EntryNotFound (404). `cut_once(repo, path, after)`: the next whole GET of that file sends its headers and `after`
bytes (default half), then closes the connection (a network drop), once. huggingface_hub resumes a cut download
from what it has written, in chunks of 10 MiB (constants.DOWNLOAD_CHUNK_SIZE): a cut past the first chunk is
resumed with a Range request, a cut within it starts the file again.

Also here: the environment a command under test runs in (`hub_env`: this fake hub, no token, no user cache, no
ATTNSERVE_* variable) and a stand-in torch that refuses to be imported and leaves a mark (`torch_blocked`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from bench.procs import Server, launch, terminate, wait_ready

API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<revision>[^/]+)$")
RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
LFS = (".safetensors", ".bin", ".onnx", ".data")  # stored in LFS on the hub: metadata in X-Linked-* headers


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> path -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> sha
    gated: bool = False


@dataclass(frozen=True)
class Asked:
    method: str
    path: str
    headers: dict[str, str]


class FakeHub:
    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.asked: list[Asked] = []
        self.cuts: dict[tuple[str, str], int | None] = {}  # (repo, path) -> bytes sent before the cut
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def publish(self, repo: str, directory: Path, refs: tuple[str, ...] = ("main",), gated: bool = False) -> str:
        """Every file under `directory` as a new commit of `repo`, which `refs` then name; its sha."""
        paths = sorted(p for p in directory.rglob("*") if p.is_file())
        files = {p.relative_to(directory).as_posix(): p.read_bytes() for p in paths}
        held = self.repos.setdefault(repo, Repo(gated=gated))
        digest = hashlib.sha1(f"{repo}\0{len(held.commits)}".encode())
        for name, content in files.items():
            digest.update(f"{name}\0".encode() + hashlib.sha256(content).digest())
        sha = digest.hexdigest()
        held.commits[sha] = files
        held.refs.update(dict.fromkeys(refs, sha))
        return sha

    def cut_once(self, repo: str, path: str, after: int | None = None) -> None:
        self.cuts[(repo, path)] = after

    def paths(self, since: int = 0) -> list[str]:
        """The paths asked, from the `since`-th request on."""
        return [a.path for a in self.asked[since:]]

    def start(self) -> str:
        """Serve (again on the same port after stop); the endpoint URL."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self._server.daemon_threads = True
        self._server.hub = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """The hub down (connections refused) for the body of the `with`, up again after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def answer(self, method: str, path: str, headers: dict[str, str]) -> Answer:
        """What the hub answers a request (header names in lower case)."""
        self.asked.append(Asked(method, path, headers))
        try:
            if api := API.match(path):
                return self._model_info(api["repo"], unquote(api["revision"]))
            if resolve := RESOLVE.match(path):
                return self._resolve(method, resolve["repo"], unquote(resolve["revision"]), unquote(resolve["path"]),
                                     headers)
            raise _Refusal(404, "RepoNotFound", f"{path}: not a route of this hub")
        except _Refusal as refusal:
            return refusal.answer

    def _commit(self, repo: str, revision: str) -> tuple[str, dict[str, bytes]]:
        held = self.repos.get(repo)
        if held is None:
            raise _Refusal(404, "RepoNotFound", f"Repository {repo} not found")
        sha = held.refs.get(revision, revision)
        if sha not in held.commits:
            raise _Refusal(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha, held.commits[sha]

    def _model_info(self, repo: str, revision: str) -> Answer:
        sha, files = self._commit(repo, revision)
        body = {"id": repo, "modelId": repo, "sha": sha, "private": False, "gated": self.repos[repo].gated and "auto",
                "siblings": [{"rfilename": name} for name in files]}
        return Answer(200, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def _resolve(self, method: str, repo: str, revision: str, path: str, headers: dict[str, str]) -> Answer:
        sha, files = self._commit(repo, revision)
        if self.repos[repo].gated and "authorization" not in headers:
            raise _Refusal(401, "GatedRepo", f"Access to model {repo} is restricted. You must have access to it and "
                           "be authenticated to access it. Please log in.")
        if path not in files:
            raise _Refusal(404, "EntryNotFound", f"{path} does not exist on {revision}")
        content = files[path]
        meta = {"X-Repo-Commit": sha, "ETag": f'"{hashlib.sha256(content).hexdigest()}"', "Accept-Ranges": "bytes"}
        if path.endswith(LFS):
            meta |= {"X-Linked-Etag": meta["ETag"], "X-Linked-Size": str(len(content))}
        start = _range_start(headers.get("range"))
        if start:
            meta["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
            return Answer(206, meta, content[start:])
        if method == "GET" and (repo, path) in self.cuts:
            after = self.cuts.pop((repo, path))
            return Answer(200, meta, content, len(content) // 2 if after is None else after)
        return Answer(200, meta, content)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    cut: int | None = None  # send this many bytes of the body, then close the connection


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
        self.answer = Answer(status, headers, json.dumps({"error": message}).encode())


def _range_start(value: str | None) -> int:
    match = re.fullmatch(r"bytes=(\d+)-", value or "")
    return int(match[1]) if match else 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._reply(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._reply(body=False)

    def _reply(self, body: bool) -> None:
        headers = {key.lower(): value for key, value in self.headers.items()}
        hub: FakeHub = self.server.hub  # type: ignore[attr-defined]
        answer = hub.answer(self.command, urlsplit(self.path).path, headers)
        self.send_response(answer.status)
        for key, value in {**answer.headers, "Content-Length": str(len(answer.body))}.items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(answer.body[: answer.cut] if answer.cut is not None else answer.body)
        if answer.cut is not None:  # a network drop: part of the body, then the connection closed
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # quiet: the tests read hub.asked
        pass


def hub_env(hub: FakeHub, home: Path, **extra: str) -> dict[str, str]:
    """This environment for a command under test: HF_ENDPOINT the fake hub, HF_HOME under `home` (no token, no user
    cache), no other HF_* or ATTNSERVE_* variable; then `extra`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "ATTNSERVE_", "HUGGING"))}
    return {**kept, "HF_ENDPOINT": hub.url, "HF_HOME": str(home / "hf-home"), **extra}


def torch_blocked(directory: Path) -> tuple[dict[str, str], Path]:
    """(variables, mark): PYTHONPATH to a package named torch whose import writes `mark`, then raises ImportError."""
    shim, mark = directory / "no-torch", directory / "torch-was-imported"
    (shim / "torch").mkdir(parents=True, exist_ok=True)
    (shim / "torch" / "__init__.py").write_text(
        f"open({str(mark)!r}, 'w').close()\nraise ImportError('torch is blocked in this test')\n")
    return {"PYTHONPATH": str(shim)}, mark


def serve_by_name(work: Path, env: dict[str, str], repo: str, ready_s: float) -> Server:
    """`attnserve serve --model REPO` (fp32, the cache under `work`, one session thread) started and ready, its log
    beside the others in `work`; the test fails with the log when it is not ready in `ready_s`."""
    argv = [sys.executable, "-m", "attnserve", "serve", f"--model={repo}", "--variants", "fp32", "--cache-dir",
            str(work / "cache"), "--intra-op-threads", "1", "--port", "{port}"]
    server = launch("attnserve", argv, work / f"serve-{len(list(work.glob('serve-*')))}.log", env)
    if not wait_ready(server, ready_s):
        status = terminate(server)
        pytest.fail(f"not ready (exit status {status}):\n{server.log()}")
    return server

