"""Images uploaded as multipart/form-data, as `curl -F file=@cat.png localhost:8000/embed` sends them, and the image
fetcher of each request.

An upload is turned into the JSON request that sends the same images as `{"image": base64}` items (the image itself
for a route that takes one image), and that request takes the JSON path from there: the short path (service.hot) or
the route, its request model's validation, every rule, every cap and every error. So an upload is answered exactly as
its JSON request is; an unknown field, a file where a text goes or too many files meet the refusals JSON meets (422).
The body limit (ATTNSERVE_PAYLOAD_LIMIT_BYTES) holds for the upload as it arrived (the edge counted it), and the
image caps for the images it holds, as for JSON.

The form's fields map onto the JSON request's by name, as OpenAPI encodes a multipart body: `file` parts (and parts
named as the route's image field) are the images, in order; a field of the request that takes a list is its
repeated parts (`-F candidate_labels=cat -F candidate_labels=dog`); a field that takes text is its part's text; any
other part's text is read as JSON (`-F normalize=false`, `-F dimensions=64`, an object), else kept as text for the
request model to refuse. Only where an image model is served (or none is loaded yet): a text model's server answers
multipart with its 415, as before, and its OpenAPI document offers no upload (service.openapi).
"""

from __future__ import annotations

import base64
import math
import types
import typing
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from inference.errors import InferenceError, InvalidRequest
from inference.registry import ModelRegistry
from service import fetch
from service.fetch import ImageFetcher
from service.hot import Render, _body, _send
from service.middleware import ASGIApp, Receive, Scope, Send, replay

FILE = "file"  # the part name curl users write (-F file=@cat.png); the route's own field name works too


@dataclass(frozen=True)
class Upload:
    """A route that takes uploads: its path, its JSON request model and the field its images go in."""

    path: str
    request: type[BaseModel]
    images: str


class ImageRequests:
    """ASGI middleware: every request runs with the server's image fetcher (service.fetch); a multipart POST to one
    of `uploads` goes on as its JSON request."""

    def __init__(self, app: ASGIApp, uploads: Mapping[str, Upload], models: Callable[[], ModelRegistry | None],
                 fetcher: ImageFetcher | None, render: Render) -> None:
        self.app, self.uploads, self.models, self.fetcher, self.render = app, uploads, models, fetcher, render

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with fetch.using(self.fetcher):
            upload = self._upload(scope)
            if upload is None:
                await self.app(scope, receive, send)
                return
            try:
                body = orjson.dumps(as_json(upload, await _form(scope, await _body(receive))))
            except InferenceError as error:
                status, headers, payload = self.render(scope["path"], error)
                await _send(send, status, payload, headers)
                return
            scope["headers"] = [*((k, v) for k, v in scope["headers"] if k.lower() not in _REPLACED),
                                (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
            await self.app(scope, replay(body, receive), send)

    def _upload(self, scope: Scope) -> Upload | None:
        """The route's Upload, for a multipart POST to it while an image model is served (or none loaded yet)."""
        if scope["type"] != "http" or scope["method"] != "POST" or (upload := self.uploads.get(scope["path"])) is None:
            return None
        if not is_multipart(Headers(scope=scope).get("content-type", "")):
            return None
        models = self.models()
        return upload if models is None or any("image" in m.modalities for m in models) else None


_REPLACED = (b"content-type", b"content-length", b"transfer-encoding")


def form_schema(upload: Upload, ref: str, request: dict[str, Any], max_inputs: int) -> dict[str, Any]:
    """The OpenAPI schema of the route's multipart body: `file` parts, its images (binary), and each other field of
    its JSON request (`request`, the schema at `ref`) as a part of its name, its schema the JSON field's (referenced,
    so the served bounds hold for both)."""
    many = _takes(upload.request.model_fields[upload.images], _is_list)
    binary = {"type": "string", "format": "binary"}
    files = {"type": "array", "items": binary, "minItems": 1, "maxItems": max_inputs} if many else binary
    files["description"] = ("The images, their bytes (PNG, JPEG, WebP or GIF), in order: curl -F file=@cat.png; "
                            "answered as the JSON request with each image as {\"image\": base64}.")
    others = [name for name in request.get("properties", {}) if name != upload.images]
    return {"type": "object", "required": [FILE, *(name for name in request.get("required", []) if name in others)],
            "properties": {FILE: files, **{name: {"$ref": f"{ref}/properties/{name}"} for name in others}}}


def is_multipart(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == "multipart/form-data"


class _InMemory(MultiPartParser):
    """Starlette's parser with every file kept in memory: the edge already holds the whole body, within its limit."""

    spool_max_size = 1 << 62


async def _form(scope: Scope, body: bytes) -> list[tuple[str, str | bytes]]:
    """The form's parts in order, each a text or a file's bytes; 422 for a body that is not a multipart form."""
    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    parser = _InMemory(Headers(scope=scope), stream(), max_files=math.inf, max_fields=math.inf,
                       max_part_size=len(body) + 1)
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise InvalidRequest(f"the request body is not a multipart form: {error.message}",
                             code="validation_error") from None
    parts: list[tuple[str, str | bytes]] = []
    for name, value in form.multi_items():
        parts.append((name, await _read(value) if isinstance(value, UploadFile) else value))
    return parts


async def _read(upload: UploadFile) -> bytes:
    try:
        return await upload.read()
    finally:
        await upload.close()


def as_json(upload: Upload, parts: list[tuple[str, str | bytes]]) -> dict[str, Any]:
    """The JSON request of a form's parts (module doc)."""
    fields = upload.request.model_fields
    grouped: dict[str, list[Any]] = {}
    for name, value in parts:
        key = upload.images if name == FILE else name
        grouped.setdefault(key, []).append(_value(value, fields.get(key), images=key == upload.images))
    return {key: values if _takes(fields.get(key), _is_list) or len(values) > 1 else values[0]
            for key, values in grouped.items()}


def _value(value: str | bytes, field: FieldInfo | None, images: bool) -> Any:
    """A part as its field's JSON value: a file as an image item (as the image itself where the field takes one
    image, a string), a text as text where the field takes text, else as the JSON it holds."""
    if isinstance(value, bytes):
        encoded = base64.b64encode(value).decode("ascii")
        return encoded if images and not _takes(field, _is_list) else {"image": encoded}
    if field is None or images or _takes(field, _is_text):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value  # the request model says what is wrong with it


def _takes(field: FieldInfo | None, kind: Callable[[Any], bool]) -> bool:
    """Whether `field`'s type, or a type in its union, or the items of a list in it, is of `kind`."""
    return field is not None and any(kind(branch) for branch in _branches(field.annotation))


def _branches(annotation: Any) -> list[Any]:
    """The types a field may take: its union's members (Annotated and Optional unwrapped), and each list's items."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _branches(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [branch for member in typing.get_args(annotation) for branch in _branches(member)]
    if origin is list:
        return [annotation, *_branches(typing.get_args(annotation)[0])]
    return [annotation]


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list


def _is_text(annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Literal:
        return any(isinstance(value, str) for value in typing.get_args(annotation))
    return isinstance(annotation, type) and issubclass(annotation, str)

