"""Image URLs of the hosts the operator lists (--image-url-hosts), fetched from a loopback HTTP server the test runs:
an image there is answered as its data URI is (bit for bit) on /embed, /v1/embeddings and
/zero-shot-image-classification; every other URL is refused by name and code before anything is fetched (a host or
port not listed, not http(s), credentials), and so is each fetch that fails (a redirect, even to a listed host; a
slow answer past image_fetch_timeout_s; a body over max_image_bytes, declared or streamed; an HTTP error; a page that
is not an image; a closed port), each a 422 naming the input, while other requests are answered meanwhile and after.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from service.cli import read_settings
from service.settings import Settings
from tests.helpers.process import free_port
from tests.helpers.serving import assert_error, post_ok, serving
from tests.helpers.vision import vit_and_clip
from tests.service.test_image_uploads import IMAGES, LABELS, noise

pytestmark = pytest.mark.asyncio(loop_scope="module")
TIMEOUT_S, IMAGE_CAP, MOST = 1.0, 40_000, 3
BIG = noise(120, 120, 7)  # over IMAGE_CAP


class Images(BaseHTTPRequestHandler):
    """The loopback image host: each path one behaviour; `hits` counts the requests per path."""

    other_port = 0
    hits: Counter[str] = Counter()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.hits[self.path] += 1
        if self.path == "/slow.png":
            time.sleep(TIMEOUT_S * 5)
        answer = getattr(self, "_" + self.path.strip("/").replace(".", "_").replace("-", "_"), None)
        if answer is None:
            self._send(404, b"not here", "text/plain")
        else:
            answer()

    def _cat_png(self) -> None:
        self._send(200, IMAGES[0], "image/png")

    def _bare(self) -> None:  # no Content-Type: the bytes say what they are
        self._send(200, IMAGES[1], None)

    def _slow_png(self) -> None:
        self._send(200, IMAGES[0], "image/png")

    def _drip_png(self) -> None:  # each byte well within a read timeout, the whole far past the cap
        self.send_response(200)
        self.send_header("content-type", "image/png")
        self.send_header("content-length", str(len(IMAGES[0])))
        self.end_headers()
        for byte in IMAGES[0][:20]:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            time.sleep(TIMEOUT_S / 4)

    def _big_png(self) -> None:  # declared over the cap: refused before its body is read
        self._send(200, BIG, "image/png")

    def _endless_png(self) -> None:  # no length: counted while it streams, the fetch stopped past the cap
        self.send_response(200)
        self.send_header("content-type", "image/png")
        self.end_headers()
        try:
            for _ in range(10_000):
                self.wfile.write(bytes(4096))
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _moved_png(self) -> None:
        self.send_response(302)
        self.send_header("location", f"http://127.0.0.1:{self.other_port}/cat.png")
        self.send_header("content-length", "0")
        self.end_headers()

    def _page_html(self) -> None:
        self._send(200, b"<html>a page</html>", "text/html; charset=utf-8")

    def _send(self, status: int, body: bytes, kind: str | None) -> None:
        self.send_response(status)
        if kind is not None:
            self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (the fetch stopped at its cap or its deadline)


@contextlib.contextmanager
def _started() -> Iterator[int]:
    """An image host on 127.0.0.1 in a thread; yields its port."""
    server = _Server(("127.0.0.1", 0), Images)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[int, int]]:
    """(the listed image host's port, another port that serves the same images but is not listed)."""
    with _started() as other, _started() as listed:
        Images.other_port = other
        yield listed, other


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def client(hosts: tuple[int, int], tmp_path_factory: pytest.TempPathFactory,
                 tiny_bundle: Path) -> AsyncIterator[httpx.AsyncClient]:
    vit, clip = vit_and_clip(tmp_path_factory)
    listed = [f"127.0.0.1:{hosts[0]}", f"127.0.0.1:{CLOSED}"]
    async with serving([f"vit={vit}", f"clip={clip}", f"text={tiny_bundle}"], intra_op_threads=1, cache_bytes=0,
                       image_url_hosts=listed, image_fetch_timeout_s=TIMEOUT_S, max_image_bytes=IMAGE_CAP,
                       max_inputs=MOST) as (_, served):
        yield served


CLOSED = free_port()  # listed, but nothing listens there


def url(port: int, path: str) -> str:
    return f"http://127.0.0.1:{port}{path}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_listed_host_s_image_is_answered_as_its_data_uri(client: httpx.AsyncClient,
                                                                 hosts: tuple[int, int]) -> None:
    port = hosts[0]
    fetched = await post_ok(client, "/v1/embeddings", {"model": "vit", "input": [
        {"image": url(port, "/cat.png")}, {"image": b64(IMAGES[1])}, {"image": url(port, "/bare")}]})
    sent = await post_ok(client, "/v1/embeddings", {"model": "vit", "input": [
        {"image": b64(IMAGES[0])}, {"image": b64(IMAGES[1])}, {"image": b64(IMAGES[1])}]})
    assert fetched == sent
    embed = await post_ok(client, "/embed?model=vit", {"inputs": {"image": url(port, "/cat.png")}})
    assert embed == await post_ok(client, "/embed?model=vit", {"inputs": {"image": b64(IMAGES[0])}})
    form = {"model": "clip", "candidate_labels": LABELS}
    zero_shot = await post_ok(client, "/zero-shot-image-classification", {**form, "image": url(port, "/cat.png")})
    assert zero_shot == await post_ok(client, "/zero-shot-image-classification", {**form, "image": b64(IMAGES[0])})
    pair = await post_ok(client, "/v1/embeddings", {"model": "clip", "input": ["a cat", {"image": url(port,
                                                                                                      "/cat.png")}]})
    assert len(pair["data"]) == 2  # a pair's text beside a fetched image


@pytest.mark.parametrize(("where", "code", "named"), [
    ("other:/cat.png", "image_url_refused", "is not one of the hosts"),  # the same server at a port not listed
    ("http://localhost:{port}/cat.png", "image_url_refused", "localhost is not one of the hosts"),
    ("ftp://127.0.0.1:{port}/cat.png", "image_url_refused", "only http and https"),
    ("http://me:secret@127.0.0.1:{port}/cat.png", "image_url_refused", "credentials"),
    ("listed:/moved.png", "image_url_refused", "redirect"),
    ("listed:/slow.png", "image_fetch_timeout", "ATTNSERVE_IMAGE_FETCH_TIMEOUT_S"),
    ("listed:/drip.png", "image_fetch_timeout", "ATTNSERVE_IMAGE_FETCH_TIMEOUT_S"),
    ("listed:/big.png", "image_too_large", "ATTNSERVE_MAX_IMAGE_BYTES"),
    ("listed:/endless.png", "image_too_large", "more than"),
    ("listed:/missing.png", "image_fetch_failed", "HTTP 404"),
    ("listed:/page.html", "invalid_image", "text/html, not an image"),
    ("closed:/cat.png", "image_fetch_failed", "could not be fetched"),
])
async def test_every_other_url_and_every_failed_fetch_is_refused_by_name(
    client: httpx.AsyncClient, hosts: tuple[int, int], where: str, code: str, named: str,
) -> None:
    port, other = hosts
    place, _, path = where.partition(":")
    target = {"listed": url(port, path), "other": url(other, path), "closed": url(CLOSED, path)}.get(
        place, where.format(port=port))
    Images.hits.clear()
    started = time.monotonic()
    response = await client.post("/v1/embeddings", json={"model": "vit", "input": [
        {"image": b64(IMAGES[0])}, {"image": target}]})
    message = assert_error(response, 422, code)["message"]
    assert message.startswith("input 1") and named in message, message
    if path in ("/slow.png", "/drip.png"):
        assert time.monotonic() - started < TIMEOUT_S * 4  # the host takes 5 x the cap
    if code == "image_url_refused" and place != "listed":
        assert not Images.hits  # refused before anything was fetched
    if path == "/moved.png":
        assert Images.hits == Counter({"/moved.png": 1})  # the redirect was not followed
    await post_ok(client, "/embed?model=vit", {"inputs": {"image": url(port, "/cat.png")}})  # still serving


async def test_more_urls_than_max_inputs_are_refused_before_any_fetch(client: httpx.AsyncClient,
                                                                      hosts: tuple[int, int]) -> None:
    Images.hits.clear()
    response = await client.post("/v1/embeddings", json={"model": "vit", "input": [
        {"image": url(hosts[0], "/cat.png")}] * (MOST + 1)})
    assert_error(response, 422, "too_many_inputs")
    assert not Images.hits


async def test_a_slow_fetch_does_not_hold_other_requests(client: httpx.AsyncClient, hosts: tuple[int, int]) -> None:
    """The fetch waits on the event loop without blocking it: requests sent meanwhile are answered first."""
    slow = asyncio.ensure_future(client.post("/zero-shot-image-classification", json={
        "model": "clip", "candidate_labels": LABELS, "image": url(hosts[0], "/slow.png")}))
    await asyncio.sleep(0.1)
    await post_ok(client, "/embed?model=vit", {"inputs": {"image": b64(IMAGES[0])}})
    assert not slow.done()
    assert_error(await slow, 422, "image_fetch_timeout")


async def test_attention_fetches_and_cohere_takes_data_uris_only(client: httpx.AsyncClient,
                                                                  hosts: tuple[int, int]) -> None:
    """/attention fetches a listed host's URL as /embed does (the same maps as the image's data URI); Cohere's
    /v2/embed takes data URIs only, by its schema (docs/vision.md)."""
    fetched = await post_ok(client, "/attention?model=vit", {"inputs": [{"image": url(hosts[0], "/cat.png")}]})
    sent = await post_ok(client, "/attention?model=vit", {"inputs": [{"image": b64(IMAGES[0])}]})
    assert fetched["data"] == sent["data"]
    response = await client.post("/v2/embed?model=vit", json={"images": [url(hosts[0], "/cat.png")]})
    assert_error(response, 422, "validation_error")


async def test_the_setting_and_its_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_IMAGE_URL_HOSTS", "Images.Example.com, 127.0.0.1:8080")
    assert Settings(bundle="b").image_url_hosts == ["images.example.com", "127.0.0.1:8080"]
    settings = read_settings(["--bundle", "b", "--image-url-hosts", "[::1]:9000", "--image-url-hosts", "cdn.test",
                              "--image-fetch-timeout-s", "2.5"], "attnserve serve")
    assert settings.image_url_hosts == ["[::1]:9000", "cdn.test"] and settings.image_fetch_timeout_s == 2.5
    for bad in ("http://cdn.test", "cdn.test/images", "user@cdn.test", "cdn.test:http", "cdn.test:70000"):
        with pytest.raises(ValueError, match="is not a host"):
            Settings(bundle="b", image_url_hosts=bad)
    monkeypatch.delenv("ATTNSERVE_IMAGE_URL_HOSTS")
    assert Settings(bundle="b").image_url_hosts == [] and Settings(bundle="b").image_fetch_timeout_s == 10.0
