"""GET / and the explorer's files, in process: open without the key (they hold no data) while the API and the
index still need it; exactly the files in service/static/ are served, with their types and a policy that
forbids loads from any other origin; nothing in them names another origin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.app import create_app
from service.middleware import OPEN_PATHS, STATIC_DIR
from service.settings import Settings
from tests.helpers.serving import assert_error, serving

KEY = "k3y-for-explorer-tests"
FILES = sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file())
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


def test_every_explorer_file_is_open_and_nothing_else_under_explore() -> None:
    explore = {p for p in OPEN_PATHS if p.startswith("/explore")}
    assert explore == {"/explore", "/explore/", *(f"/explore/{name}" for name in FILES)}
    assert {"explore.html", "app.js", "explore.css"} <= set(FILES)


async def test_the_page_and_files_load_without_the_key(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle, api_key=KEY) as (_, client):
        for path in ["/explore", *(f"/explore/{name}" for name in FILES)]:
            response = await client.get(path)
            assert response.status_code == 200, path
            suffix = ".html" if path == "/explore" else Path(path).suffix
            assert response.headers["content-type"].startswith(TYPES[suffix]), path
            assert response.headers["content-security-policy"].startswith("default-src 'self';"), path
            assert response.headers["x-content-type-options"] == "nosniff"
        assert (await client.get("/explore")).text == (STATIC_DIR / "explore.html").read_text()
        slash = await client.get("/explore/")
        assert (slash.status_code, slash.headers["location"]) == (308, "/explore")
        assert_error(await client.get("/explore/../info"), 401)
        assert_error(await client.get("/explore/nope.js"), 401)  # not a file: not open either
        assert_error(await client.get("/info"), 401)
        assert_error(await client.post("/attention", json={"inputs": "a"}), 401)


async def test_unknown_explorer_file_is_404_in_the_one_error_shape(tiny_bundle: Path) -> None:
    async with serving(tiny_bundle) as (_, client):
        assert_error(await client.get("/explore/nope.js"), 404, "not_found")
        assert_error(await client.get("/explore/%2e%2e%2fmanifest.json"), 404)


@pytest.mark.parametrize("key", [None, KEY])
async def test_index_links_the_explorer_and_needs_the_key_when_one_is_set(tiny_bundle: Path, key: str | None) -> None:
    async with serving(tiny_bundle, api_key=key) as (_, client):
        if key is not None:
            assert_error(await client.get("/"), 401)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        response = await client.get("/", headers=headers)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        links = set(re.findall(r'href="([^"]+)"', response.text))
        assert {"/explore", "/docs", "/info"} <= links


def test_index_is_documented_and_the_explorer_files_are_not_api_operations() -> None:
    paths = create_app(Settings(bundle=Path("unused"))).openapi()["paths"]
    operation = paths["/"]["get"]
    assert "text/html" in operation["responses"]["200"]["content"] and "401" in operation["responses"]
    assert not [path for path in paths if path.startswith("/explore")]


def test_the_files_load_nothing_from_another_origin() -> None:
    """Offline by construction: no absolute URL but the SVG namespace, every import and link on this origin."""
    for name in FILES:
        text = (STATIC_DIR / name).read_text()
        urls = set(re.findall(r"[a-z]+://[^\s\"'<>)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, (name, urls)
        for target in re.findall(r'(?:src|href)="([^"]+)"', text) + re.findall(r'from "([^"]+)"', text):
            assert target.startswith(("/explore", "./")), (name, target)
            assert (STATIC_DIR / Path(target).name).is_file() or target == "/explore", (name, target)
