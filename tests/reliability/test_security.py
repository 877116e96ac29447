"""Security: API key on every non-public route, CORS only for configured origins, no code-executing
loaders in the service, and bundle loading that opens files inside the bundle directory only.
(The Docker image's non-root USER is asserted by tests/test_dockerfile.py.)
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference.errors import StartupError
from inference.options import LoadOptions
from inference.runtime.loading import load_bundle
from service.app import create_app
from service.settings import Settings
from tests.helpers.serving import assert_error, graph_runs, serving

KEY = "k3y-for-tests-0123456789"
PUBLIC = {"/health", "/ready", "/metrics"}
DOCS = ["/openapi.json", "/docs", "/redoc"]  # not operations in the document, protected all the same
SERVICE = Path(__file__).resolve().parents[2] / "service"


def body(path: str) -> dict[str, object]:
    shaped = {"/v1/embeddings": {"input": "a"}, "/decode": {"ids": [5]},
              "/similarity": {"inputs": {"source_sentence": "a", "sentences": ["b"]}}}
    return shaped.get(path, {"inputs": "a"})


def operations() -> list[tuple[str, str]]:
    """(method, path) of every operation in the OpenAPI document: routes added later are covered too."""
    paths = create_app(Settings(bundle=Path("unused"))).openapi()["paths"]
    return sorted((method.upper(), path) for path, ops in paths.items() for method in ops)


# /v2 answers in its protocol's own error body: tests/service/test_v2.py checks its key there.
PROTECTED = [(m, p) for m, p in operations() if p not in PUBLIC and not p.startswith("/v2")]
PROTECTED += [("GET", p) for p in DOCS]
WRONG = {
    "missing": {}, "wrong_key": {"Authorization": "Bearer nope"}, "prefix": {"Authorization": f"Bearer {KEY[:-1]}"},
    "longer": {"Authorization": f"Bearer {KEY}x"}, "basic_scheme": {"Authorization": f"Basic {KEY}"},
    "bare_key": {"Authorization": KEY}, "other_header": {"X-API-Key": KEY},
    "empty_bearer": {"Authorization": "Bearer "},
}


async def test_every_non_public_route_needs_the_key(tiny_bundle: Path) -> None:
    assert {p for _, p in PROTECTED} >= {"/embed", "/classify", "/attention", "/tokenize", "/v1/embeddings", "/info"}
    async with serving(tiny_bundle, api_key=KEY) as (_, client):
        auth = {"Authorization": f"bearer {KEY}"}
        served = set((await client.get("/openapi.json", headers=auth)).json()["paths"])  # what the tiny model can
        for method, path in PROTECTED:
            for name, headers in WRONG.items():
                response = await client.request(method, path, json=body(path), headers=headers)
                error = assert_error(response, 401, "invalid_api_key")
                assert KEY not in response.text, name
                assert response.headers["www-authenticate"] == "Bearer", (method, path, name)
                assert error["type"] == "authentication_error"
            ok = await client.request(method, path, json=body(path), headers=auth)
            assert ok.status_code == (200 if path in served or path in DOCS else 404), (method, path, ok.text)
        for path in ("/health", "/ready", "/metrics"):
            assert (await client.get(path)).status_code == 200
        assert_error(await client.get("/no/such/route"), 401)  # nor which paths exist


@pytest.mark.parametrize("sent", [b"{not json", b'{"inputs": []}', b"x" * 5000], ids=["malformed", "invalid", "big"])
async def test_unauthenticated_requests_learn_nothing_about_the_body(tiny_bundle: Path, sent: bytes) -> None:
    """Checked at the edge before the body is read: 401, not 422 or 413."""
    async with serving(tiny_bundle, api_key=KEY, payload_limit_bytes=4096) as (app, client):
        runs = graph_runs(app)
        for path in ("/embed", "/v1/embeddings", "/attention"):
            response = await client.post(path, content=sent, headers={"content-type": "application/json"})
            assert_error(response, 401, "invalid_api_key")
        assert graph_runs(app) == runs


async def test_cors_headers_absent_by_default(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle) as (_, client):
        for response in await _cross_origin(client, "http://evil.example"):
            assert not [h for h in response.headers if h.startswith("access-control-")], response.headers


async def test_cors_only_for_configured_origins(tiny_bundle: Path) -> None:
    allowed = "http://ui.example"
    async with serving(tiny_bundle, cors_origins=f"{allowed}, http://other.example") as (_, client):
        for response in await _cross_origin(client, allowed):
            assert response.headers["access-control-allow-origin"] == allowed
            assert "access-control-allow-credentials" not in response.headers
        for origin in ("http://evil.example", "http://ui.example.evil.example", "null"):
            for response in await _cross_origin(client, origin):
                assert response.headers.get("access-control-allow-origin") in (None,), (origin, response.headers)


async def _cross_origin(client: httpx.AsyncClient, origin: str) -> list[httpx.Response]:
    preflight = {"Origin": origin, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}
    return [
        await client.options("/embed", headers=preflight),
        await client.post("/embed", json={"inputs": "a"}, headers={"Origin": origin}),
        await client.get("/health", headers={"Origin": origin}),
    ]


FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "joblib", "torch", "cloudpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def _findings(path: Path) -> list[str]:
    tree, found = ast.parse(path.read_text(), str(path)), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"import {n}" for n in names if n.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{func.id}(")
            if isinstance(func, ast.Attribute) and func.attr in ("load", "loads") and \
                    isinstance(func.value, ast.Name) and func.value.id in FORBIDDEN_MODULES:
                found.append(f"{func.value.id}.{func.attr}(")
            if isinstance(func, ast.Attribute) and func.attr == "load" and any(
                    k.arg == "allow_pickle" for k in node.keywords):
                found.append("load(allow_pickle=...)")
    text = path.read_text()
    found += [f"text {word!r}" for word in ("pickle", "torch.load", "eval(", "exec(") if word in text]
    return [f"{path.relative_to(SERVICE.parent)}: {f}" for f in found]


def test_service_source_has_no_code_executing_loaders() -> None:
    files = sorted(SERVICE.rglob("*.py"))
    assert len(files) > 10
    assert [f for path in files for f in _findings(path)] == []


class OpenSpy:
    """Records every path that Python, onnxruntime and tokenizers open while it is installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import onnxruntime
        import tokenizers

        self.paths: list[Path] = []
        real_open, real_os_open = builtins.open, os.open
        real_session, real_from_file = onnxruntime.InferenceSession, tokenizers.Tokenizer.from_file

        def spy_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            self._record(file)
            return real_open(file, *args, **kwargs)

        def spy_os_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            self._record(file)
            return real_os_open(file, *args, **kwargs)

        def spy_session(path: Any, *args: Any, **kwargs: Any) -> Any:
            self._record(path)
            return real_session(path, *args, **kwargs)

        def spy_from_file(path: str) -> Any:
            self._record(path)
            return real_from_file(path)

        for target, name, value in ((builtins, "open", spy_open), (io, "open", spy_open), (os, "open", spy_os_open),
                                    (onnxruntime, "InferenceSession", spy_session)):
            monkeypatch.setattr(target, name, value)
        monkeypatch.setattr(tokenizers.Tokenizer, "from_file", staticmethod(spy_from_file))

    def _record(self, file: Any) -> None:
        if isinstance(file, str | bytes | os.PathLike):
            self.paths.append(Path(os.fsdecode(file)).resolve())


def test_bundle_load_opens_files_inside_the_bundle_only(tiny_bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bundle.verify  # noqa: F401  (imported before the spy: imports are not bundle reads)

    spy = OpenSpy(monkeypatch)
    loaded = load_bundle(tiny_bundle, LoadOptions(intra_op_threads=1))
    monkeypatch.undo()
    inside = tiny_bundle.resolve()
    assert spy.paths, "the spy saw nothing"
    files = {"manifest.json", "tokenizer.json", *(g.file for g in loaded.manifest.graphs)}
    assert {p.name for p in spy.paths} >= files
    assert [p for p in spy.paths if not p.is_relative_to(inside)] == []


@pytest.mark.parametrize("target", ["../outside.onnx", "/etc/passwd", "sub/../../outside.onnx", "..\\outside.onnx"])
def test_manifest_paths_out_of_the_bundle_are_refused(tiny_bundle: Path, tmp_path: Path, target: str) -> None:
    import json

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    shutil.copy(bundle / "fast-fp32.onnx", tmp_path / "outside.onnx")
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["graphs"][0]["file"] = target
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StartupError, match="not a plain file name"):
        load_bundle(bundle, LoadOptions())


def test_a_graph_symlinked_out_of_the_bundle_is_refused(tiny_bundle: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    outside = tmp_path / "outside.onnx"
    (bundle / "fast-fp32.onnx").rename(outside)
    (bundle / "fast-fp32.onnx").symlink_to(outside)
    with pytest.raises(StartupError, match="fast-fp32.onnx.*outside the bundle"):
        load_bundle(bundle, LoadOptions())
