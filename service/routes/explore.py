"""GET / (a small index page) and GET /explore (the attention explorer: one page and its files).

The explorer is plain HTML, CSS and ES modules in service/static/, with no build step and nothing from
another origin: every response carries a Content-Security-Policy that allows this origin only. The page
talks to this service's own routes (/v1/models, /info, /classify, /attention).

The page and its files hold no data, so they are open (service.middleware.OPEN_PATHS lists exactly the
files in service/static/); the page asks for the API key when the API answers 401 and sends it as
`Authorization: Bearer` on its calls. GET / is not open: POST / is the API's, and the key check is per path.
"""

from __future__ import annotations

import functools

from fastapi import APIRouter, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from attnserve import __version__
from service.errors import NotFound
from service.middleware import EXPLORE_PATHS, STATIC_DIR
from service.routes.common import errors

router = APIRouter(tags=["explorer"])

PAGE = "explore.html"
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml", ".txt": "text/plain; charset=utf-8",
}
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
INDEX = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>attnserve</title>
<link rel="icon" href="/explore/icon.svg"></head>
<body><h1>attnserve {__version__}</h1><p>Inference service for transformer encoders.</p>
<ul><li><a href="/explore">Attention explorer</a></li><li><a href="/docs">API documentation</a></li>
<li><a href="/info">Model and limits (JSON)</a></li></ul></body></html>
"""


@router.get("/", response_class=HTMLResponse, responses=errors(401), summary="Index page")
async def index() -> Response:
    """A small HTML page linking the explorer, the API documentation and /info."""
    return HTMLResponse(INDEX, headers=_HEADERS)


@router.get("/explore", include_in_schema=False)
async def explore() -> Response:
    """The explorer's page (open: it holds no data)."""
    return _file(PAGE)


@router.get("/explore/", include_in_schema=False)
async def explore_slash() -> Response:
    """The page's links are absolute, but /explore/ is what people type too."""
    return RedirectResponse("/explore", status_code=308)


@router.get("/explore/{name}", include_in_schema=False)
async def explore_file(name: str) -> Response:
    """One of the files in service/static/ (open: they hold no data); any other name is 404."""
    return _file(name)


def _file(name: str) -> Response:
    if f"/explore/{name}" not in EXPLORE_PATHS:
        raise NotFound(f"no explorer file named {name!r}")
    content, media_type = _read(name)
    return Response(content, media_type=media_type, headers=_HEADERS)


@functools.cache
def _read(name: str) -> tuple[bytes, str]:
    """A file's bytes and type, read once (a few small files, shipped with the package)."""
    path = STATIC_DIR / name
    return path.read_bytes(), _TYPES.get(path.suffix, "application/octet-stream")
