"""The server's settings: the core's options (`inference.options.ServingOptions`: loading, batching, request
limits), the options of models served by name (`hub.options.HubOptions`: the bundle cache, the export step) and the
HTTP front's own knobs, each typed and documented, read from the environment (ATTNSERVE_*) or CLI flags.

Nothing is read at import time: `Settings()` reads the environment when the CLI (or a test) builds it,
and the result is passed into `create_app(settings)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from attnserve.flags import split_items
from hub.names import ModelName
from hub.options import HubOptions
from inference.options import ServingOptions
from inference.registry import MODEL_NAME, ServedBundle


class Settings(ServingOptions, HubOptions, BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", frozen=True)

    bundle: Annotated[list[ServedBundle], NoDecode] = Field(
        default_factory=list, description="Bundle directory (manifest.json, tokenizer.json, *.onnx) made by "
        "`attnserve export`, as `[NAME=]DIR`; repeat the flag (or separate items by commas) to serve several "
        "models, each with its own sessions and batcher. NAME defaults to the manifest's name; names must be "
        "unique. Requests choose a model by name; those naming none go to the first. A bundle or a model is needed.",
    )
    model: Annotated[list[ModelName], NoDecode] = Field(
        default_factory=list, description="A model by name, as `[ALIAS=]NAME[@REVISION]`: a hub repository id "
        "(BAAI/bge-m3) or a local directory, at a branch, tag or commit (default main), served under ALIAS, else "
        "NAME. Its bundle comes from the bundle cache (cache_dir), else is made there first: a repository that "
        "holds an attnserve bundle is downloaded and verified, a checkpoint downloaded and exported by `attnserve "
        "pull` in a subprocess (this process never imports torch). Repeat (or separate by commas) for several; "
        "they are served after the bundles, and beside other models each needs a name that fits in a URL path (a "
        "hub name takes an ALIAS).",
    )
    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 exposes the service beyond this machine.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    payload_limit_bytes: int = Field(
        2 * 1024 * 1024, ge=1, description="Largest request body; bigger bodies are refused with 413 while reading.",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a client has to send a request's line and headers, from connecting (or "
        "from the first byte of a later request on a kept-alive connection); past it the server answers 408 and "
        "closes the connection, so slow-header clients cannot hold connections open.",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="Seconds a client has to send a whole request body once its headers are in; past "
        "it the server answers 408 JSON and closes the connection (a trickled body cannot hold a connection). "
        "Bounds the slowest upload: payload_limit_bytes / body_timeout_s bytes per second.",
    )
    api_key: SecretStr | None = Field(
        None, description="When set, every route except /health, /ready, /metrics, /v2/health/* and the "
        "explorer's page and files (/explore) needs `Authorization: Bearer <key>` (401 otherwise). This key is "
        "one interactive caller named default, with no budget, beside those of api_keys_file.",
    )
    api_keys_file: Path | None = Field(
        None, description="TOML file of callers, one [[key]] each: name, sha256 (hex, of the key), priority "
        "(interactive or bulk), optional tokens_per_minute and models (README, Callers). When set, every route "
        "but the open ones needs one of its keys (401), a key may use only its models (403), a caller over its "
        "budget gets 429 with Retry-After. Re-read when it changes and on SIGHUP, with no restart; a file that "
        "does not parse keeps the previous keys (and stops the start when it is the first).",
    )
    api_keys_check_s: float = Field(
        1.0, gt=0, description="Seconds between checks of api_keys_file for a change (its time, size or inode); a "
        "changed file is read at once. SIGHUP reads it without waiting.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated origins allowed by CORS; empty means no CORS headers.",
    )
    image_url_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Hosts whose http and https image URLs the server fetches, as `HOST` (any "
        "port) or `HOST:PORT`, comma-separated or the flag repeated; every other URL is refused (422 "
        "image_url_refused). Empty (the default): no URL is fetched. A server that fetches what a caller names can be "
        "made to reach what the caller cannot (SSRF): list only hosts that serve images to anyone. No redirect is "
        "followed and no proxy used; max_image_bytes and image_fetch_timeout_s bound each fetch (docs/vision.md).",
    )
    image_fetch_timeout_s: float = Field(
        10.0, gt=0, description="Seconds one image URL (image_url_hosts) has to answer with all its bytes, from "
        "connecting; past it the request is refused (422 image_fetch_timeout). The URLs of one request are fetched "
        "side by side.",
    )
    log_format: Literal["text", "json"] = Field("text", description="Log lines as plain text or one JSON object each.")
    access_log: bool = Field(
        False, description="One log line per request (method, path, status; uvicorn's access log). Off by default: "
        "formatting and writing it is a measurable share of a small request's CPU, and /metrics counts requests "
        "by route, status, model and duration.",
    )
    graceful_timeout_s: float = Field(
        30.0, gt=0, description="On SIGTERM, seconds to finish admitted requests before the server exits.",
    )

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str | list):
            return split_items(value)
        return value

    @field_validator("image_url_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str | list):
            return [host_entry(item) for item in split_items(value)]
        return value

    @field_validator("bundle", mode="before")
    @classmethod
    def _parse_bundles(cls, value: object) -> object:
        if isinstance(value, str | Path | list):
            return [_served_bundle(item) for item in split_items(value)]
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _parse_models(cls, value: object) -> object:
        if isinstance(value, str | list):
            return [_named_model(item) for item in split_items(value)]
        return value

    @model_validator(mode="after")
    def _models_to_serve(self) -> Settings:
        """A bundle or a model to serve; each name given once; every reranker recipe for a named model."""
        if not self.bundle and not self.model:
            raise ValueError("nothing to serve: give a bundle (--bundle, ATTNSERVE_BUNDLE) or a model by name "
                             "(--model, ATTNSERVE_MODEL)")
        served = [m.served_name for m in self.model]
        names = [b.name for b in self.bundle if b.name is not None] + served
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"the model name {name!r} is given to more than one bundle or model")
        for model, name in zip(self.model, served, strict=True):
            if len(self.bundle) + len(self.model) > 1 and not MODEL_NAME.match(name):
                raise ValueError(f"model {str(model)!r}: beside other models it needs a name that fits in a URL path "
                                 f"(/v2/models/NAME/infer); serve it under one, as ALIAS={model}")
        self.check_rerankers(served)
        return self


def host_entry(item: object) -> object:
    """A host of image_url_hosts as URLs are matched against it: lower case, `HOST` or `HOST:PORT` (an IPv6 address
    in brackets); what is not one is refused at start."""
    if not isinstance(item, str):
        return item
    entry = item.strip().lower()
    parts = urlsplit(f"http://{entry}")
    try:
        parts.port  # noqa: B018 (ValueError for a port that is not one)
    except ValueError:
        entry = ""
    if not parts.hostname or parts.netloc != entry or "@" in entry:
        raise ValueError(f"image URL host {item!r} is not a host or host:port (an IPv6 address in brackets)")
    return entry


def _served_bundle(item: object) -> object:
    """`DIR` or `NAME=DIR` (a `=` after a slash belongs to the directory); other types pass to pydantic."""
    if isinstance(item, Path):
        return ServedBundle(path=item)
    if not isinstance(item, str):
        return item
    name, equals, path = item.partition("=")
    if not equals or "/" in name:
        return ServedBundle(path=Path(item))
    if not MODEL_NAME.match(name):
        raise ValueError(f"bundle item {item!r}: {name!r} is not a model name (letters, digits, '.', '_', ':', "
                         "'-'; it starts with a letter or digit)")
    if not path:
        raise ValueError(f"bundle item {item!r}: no directory after '='")
    return ServedBundle(name=name, path=Path(path))


def _named_model(item: object) -> object:
    """`[ALIAS=]NAME[@REVISION]`, its ALIAS a model name; other types pass to pydantic."""
    if not isinstance(item, str):
        return item
    named = ModelName.parse(item)
    if named.alias is not None and not MODEL_NAME.match(named.alias):
        raise ValueError(f"model item {item!r}: {named.alias!r} is not a model name (letters, digits, '.', '_', ':', "
                         "'-'; it starts with a letter or digit)")
    return named


def settings_table() -> str:
    """The settings as service/README.md lists them (flag, variable, default, meaning): `python -m
    service.settings` prints it, and a test checks the README holds it row for row."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    own = [name for name in Settings.model_fields if name in Settings.__annotations__]
    for name in own + [name for name in Settings.model_fields if name not in own]:
        field = Settings.model_fields[name]
        default = "required" if field.is_required() else field.get_default(call_default_factory=True)
        meaning = (field.description or "").replace("|", "\\|")
        rows.append(f"| `--{name.replace('_', '-')}` | `ATTNSERVE_{name.upper()}` | `{default}` | {meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(settings_table())
