"""Image URLs, fetched from the hosts the operator lists (ATTNSERVE_IMAGE_URL_HOSTS) and from nowhere else.

A server that fetches what a caller names can be made to reach what the caller cannot (SSRF): with no hosts listed
(the default) every URL is refused, as before. With hosts listed, an http or https URL whose host (or host:port) is
one of them is fetched, asynchronously, on the event loop:

- no redirect is followed: a 3xx is refused, since its target could be any host;
- no proxy, .netrc or other environment is consulted (the client's trust_env is off): the fetch goes where the URL
  says, and a URL carrying credentials is refused;
- at most max_image_bytes are read: a Content-Length over it is refused before the body, and the body is counted
  while it streams, the fetch stopped as soon as it passes the cap;
- everything, from connecting to the last byte, within image_fetch_timeout_s.

Every failure is a 422 naming the input (`InvalidImage`), never a 5xx: the caller chose the URL and the server is
well, while a 502 or 504 would count against the server's own health (a load balancer's outlier detection, 5xx
alerts) and invite clients' automatic retries of a fetch that failed for the URL's sake. Codes: image_url_refused
(not fetched: the host is not listed, not http(s), credentials, a redirect), image_fetch_failed (unreachable, an HTTP
status other than 200), image_fetch_timeout, image_too_large, invalid_image (the answer says it is not an image).

The fetcher of the request is a context variable, set by `service.uploads.ImageRequests` around every request: the
FastAPI routes and the short path (service.hot) share their answer functions, whose signature holds no app state.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx2

from inference.errors import InvalidImage

if TYPE_CHECKING:
    from service.settings import Settings

_FETCHER: ContextVar[ImageFetcher | None] = ContextVar("image_fetcher", default=None)
IMAGE_TYPES = ("image/", "application/octet-stream")  # a Content-Type that may hold an image (or none given)


@dataclass(frozen=True)
class ImageFetcher:
    """Fetches image URLs of `hosts` (lower-case `host` or `host:port`), at most `max_bytes` each, within
    `timeout_s` each, at most `max_urls` for one request (service.images.fetching). `tls`: the certificates https is
    checked against, loaded once at start (loading them takes about 0.1 s, which no request should wait on the event
    loop for)."""

    hosts: frozenset[str]
    max_bytes: int
    timeout_s: float
    max_urls: int
    tls: ssl.SSLContext

    async def fetch(self, url: str, index: int) -> bytes:
        """The bytes at `url`, input `index` of its request; InvalidImage when they cannot be had (module doc)."""
        self._check_url(url, index)
        try:
            async with (
                asyncio.timeout(self.timeout_s),  # the whole fetch: httpx's own timeouts bound each read only
                httpx2.AsyncClient(follow_redirects=False, trust_env=False, timeout=self.timeout_s,
                                   verify=self.tls) as client,
                client.stream("GET", url, headers={"accept": "image/*", "accept-encoding": "identity"}) as response,
            ):
                self._check_answer(response, url, index)
                return await self._body(response, url, index)
        except (TimeoutError, httpx2.TimeoutException):
            raise InvalidImage(f"input {index}: {url} did not send the image within {self.timeout_s:g} s "
                               "(ATTNSERVE_IMAGE_FETCH_TIMEOUT_S)", code="image_fetch_timeout") from None
        except httpx2.HTTPError as error:
            raise InvalidImage(f"input {index}: {url} could not be fetched ({type(error).__name__})",
                               code="image_fetch_failed") from None

    def _check_url(self, url: str, index: int) -> None:
        if (why := self._refusal(url)) is not None:
            raise InvalidImage(f"input {index} is a URL that is not fetched: {why}", code="image_url_refused")

    def _refusal(self, url: str) -> str | None:
        """Why `url` is not fetched: not http(s), credentials, or a host (at any port, or at its own) not listed."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            return "only http and https URLs are fetched"
        if "@" in parts.netloc:
            return "a URL with credentials is not fetched"
        host = parts.hostname or ""
        named = f"[{host}]" if ":" in host else host  # an IPv6 address, as the setting writes it
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            return "its port is not one"
        if not {named, f"{named}:{port}"} & self.hosts:
            return f"{named or 'its host'} is not one of the hosts images are fetched from (ATTNSERVE_IMAGE_URL_HOSTS)"
        return None

    def _check_answer(self, response: httpx2.Response, url: str, index: int) -> None:
        """The answer's status, type and declared size, before its body is read."""
        if response.is_redirect:
            raise InvalidImage(f"input {index}: {url} answered a redirect ({response.status_code}), which is not "
                               "followed (it could lead to any host); send the image's own URL",
                               code="image_url_refused")
        if response.status_code != 200:
            raise InvalidImage(f"input {index}: {url} answered HTTP {response.status_code}",
                               code="image_fetch_failed")
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and not kind.startswith(IMAGE_TYPES):
            raise InvalidImage(f"input {index}: {url} is {kind}, not an image")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large(url, index, int(declared))

    async def _body(self, response: httpx2.Response, url: str, index: int) -> bytes:
        """The body, stopped as soon as it passes max_bytes."""
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise self._too_large(url, index, size, more=True)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, url: str, index: int, size: int, more: bool = False) -> InvalidImage:
        return InvalidImage(f"input {index}: {url} holds {'more than ' if more else ''}{size} bytes, over the limit "
                            f"of {self.max_bytes} per image (ATTNSERVE_MAX_IMAGE_BYTES)", code="image_too_large")


def fetcher_of(settings: Settings) -> ImageFetcher | None:
    """The server's fetcher: None where no host is listed (no URL is fetched)."""
    if not settings.image_url_hosts:
        return None
    return ImageFetcher(frozenset(settings.image_url_hosts), settings.max_image_bytes, settings.image_fetch_timeout_s,
                        settings.max_inputs, httpx2.create_ssl_context())


def current() -> ImageFetcher | None:
    """The fetcher of the request being answered; None where no URL may be fetched."""
    return _FETCHER.get()


@contextlib.contextmanager
def using(fetcher: ImageFetcher | None) -> Iterator[None]:
    """`fetcher` is the one of what runs inside (a request)."""
    token = _FETCHER.set(fetcher)
    try:
        yield
    finally:
        _FETCHER.reset(token)
