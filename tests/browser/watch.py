"""A page under watch: every request it makes (URL, method, headers), every console message and page error,
for the checks that the explorer stays on loopback and logs no errors; and the steps the tests repeat
(open the explorer, run texts, wait for a view, take a screenshot), and what the tests read beside the page
(a picker's options, the bodies it sent, /attention's float16 maps as the page asks for them)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
from playwright.sync_api import ConsoleMessage, Page, Request, Route

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"  # ignored by git; the README's image is a copy of one of these
WAIT_MS = 20_000


def on_loopback(url: str) -> bool:
    """http(s) to 127.0.0.1, or a blob: URL this origin made (an export's download)."""
    parts = urlsplit(url[len("blob:"):] if url.startswith("blob:") else url)
    return parts.scheme in ("http", "https") and parts.hostname == "127.0.0.1"


class Watched:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.requests: list[Request] = []
        self.blocked: list[str] = []
        self.console: list[ConsoleMessage] = []
        self.page_errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request))
        page.on("console", lambda message: self.console.append(message))
        page.on("pageerror", lambda error: self.page_errors.append(str(error)))

    def route(self, route: Route) -> None:
        """Every request of the context passes here: off-loopback ones are recorded and refused."""
        if on_loopback(route.request.url):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    # -- steps -------------------------------------------------------------------------------------
    def open(self, base_url: str) -> None:
        """Load the explorer and wait for its first run (the example text) to end: drawn, as a message, or as
        the note that the model has no attention graph."""
        self.page.goto(f"{base_url}/explore")
        self.page.wait_for_selector("#views:is([data-state=ready], [data-state=error], [data-state=unavailable])",
                                    state="attached", timeout=WAIT_MS)

    def run(self, *texts: str) -> None:
        page = self.page
        page.set_checked("#compare", len(texts) > 1)
        for box, text in zip(("#text-a", "#text-b"), texts, strict=False):
            page.fill(box, text)
        page.click("#run")
        self.wait_for(panel_text=texts[-1])

    def wait_for(self, view: str | None = None, title: str | None = None, panel_text: str | None = None,
                 model: str | None = None) -> None:
        """Until #views is drawn (for this view, map title, text and model when given)."""
        selector = "#views[data-state=ready]"
        selector += f"[data-model={json.dumps(model)}]" if model else ""
        selector += f"[data-view={view}]" if view else ""
        selector += f"[data-title={json.dumps(title, ensure_ascii=False)}]" if title else ""
        selector += f" .panel[data-text={json.dumps(panel_text, ensure_ascii=False)}]" if panel_text else ""
        self.page.wait_for_selector(selector, timeout=WAIT_MS)

    def answer_label(self, text: str) -> str | None:
        """The best label the page shows for a text (once /classify's answer for it is in)."""
        selector = f".answer[data-text={json.dumps(text, ensure_ascii=False)}]"
        self.page.wait_for_selector(selector, timeout=WAIT_MS)
        return self.page.get_attribute(selector, "data-label")

    def readout(self, panel: int = 0) -> dict[str, str]:
        """The read-out's text and data-* attributes of a panel (what the page shows)."""
        node = self.page.locator(".panel .readout").nth(panel)
        return {"text": node.inner_text(), **node.evaluate("n => ({...n.dataset})")}

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=path, full_page=True)
        return path

    # -- checks ------------------------------------------------------------------------------------
    def urls(self) -> list[str]:
        return [r.url for r in self.requests]

    def assert_clean(self, expected_statuses: tuple[int, ...] = ()) -> None:
        """Every request went to 127.0.0.1; no page error; no console error but the browser's own line for
        an API answer whose status the test provoked on purpose."""
        assert any(urlsplit(u).path == "/attention" for u in self.urls()), "the page made no /attention request"
        assert not self.blocked, f"requests off loopback: {self.blocked}"
        assert all(on_loopback(u) for u in self.urls()), self.urls()
        assert not self.page_errors, self.page_errors
        statuses = "|".join(str(s) for s in expected_statuses) or "none"
        provoked = re.compile(rf"^Failed to load resource: the server responded with a status of ({statuses}) ")
        errors = [m.text for m in self.console if m.type == "error" and not provoked.match(m.text)]
        assert not errors, errors


def options(watched: Watched, select: str) -> list[str]:
    return watched.page.locator(f"{select} option").evaluate_all("nodes => nodes.map(n => n.value)")


def bodies(watched: Watched, path: str, since: int = 0) -> list[dict[str, Any]]:
    """The JSON bodies of the page's requests to `path`, from its `since`-th request on."""
    return [r.post_data_json for r in watched.requests[since:] if urlsplit(r.url).path == path]


def half_maps(base_url: str, text: str, **body: Any) -> np.ndarray:
    """/attention's answer as the page asks for it (base64 float16), decoded by numpy: (l, h, n, n)."""
    request = {"inputs": text, "encoding": "base64", "dtype": "float16", **body}
    response = httpx.post(f"{base_url}/attention", json=request, timeout=30)
    assert response.status_code == 200, response.text
    item = response.json()["data"][0]
    return np.frombuffer(base64.b64decode(item["attention"]), dtype="<f2").reshape(item["shape"])
