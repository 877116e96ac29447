"""Shared service fixtures and helpers: one tiny checkpoint exported to a real bundle per session, an
in-process app (lifespan running) driven by httpx, and the one-error-shape assertion.

Conftests re-export the fixtures (`from tests.helpers.serving import bundle_dir, tiny_paths`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from service.app import create_app
from service.settings import Settings


@pytest.fixture(scope="session")
def tiny_paths(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(checkpoint dir, bundle dir): a seeded tiny encoder with a 2-label head, exported as fp32."""
    from export.bundle import export_bundle
    from tests.helpers.tiny import make_tiny_checkpoint

    root = tmp_path_factory.mktemp("tiny")
    checkpoint = make_tiny_checkpoint(root / "checkpoint", head=True)
    export_bundle(checkpoint, root / "bundle", variants=("fp32",))
    return checkpoint, root / "bundle"


@pytest.fixture(scope="session")
def bundle_dir(tiny_paths: tuple[Path, Path]) -> Path:
    return tiny_paths[1]


@asynccontextmanager
async def serving(bundle: Path, **overrides: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app with its lifespan running and an httpx client talking to it in process."""
    app = create_app(Settings(bundle=bundle, **overrides))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            yield app, client


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The one error shape, a request id, and no internals."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}, body
    assert response.headers.get("x-request-id")
    assert "Traceback" not in response.text and "/work/" not in response.text and ".py" not in response.text
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]
