"""Service settings: one typed knob per trade-off, read from the environment (ATTNSERVE_*) or CLI flags.

Nothing is read at import time: `Settings()` reads the environment when the CLI (or a test) builds it,
and the result is passed into `create_app(settings)`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bundle.session import cpu_cores

Provider = Literal["auto", "cuda", "cpu"]
VariantChoice = Literal["auto", "fp32", "fp32-opt", "int8", "int8-dynamic", "fp16"]
# A served model's name is one URL path segment (/v2/models/{name}/infer): no slash, no spaces.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class ServedBundle(BaseModel):
    """One `[NAME=]DIR` item of ATTNSERVE_BUNDLE / --bundle."""

    model_config = ConfigDict(frozen=True)
    name: str | None = None  # None: the manifest's name
    path: Path


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", frozen=True)

    bundle: Annotated[list[ServedBundle], NoDecode] = Field(
        min_length=1, description="Bundle directory (manifest.json, tokenizer.json, *.onnx) made by `attnserve "
        "export`, as `[NAME=]DIR`; repeat the flag (or separate items by commas) to serve several models, each "
        "with its own sessions and batcher. NAME defaults to the manifest's name; names must be unique. "
        "Requests choose a model by name; those naming none go to the first.",
    )
    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 exposes the service beyond this machine.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    provider: Provider = Field(
        "auto", description="onnxruntime provider: auto uses CUDA when a session really runs on it, else CPU; "
        "cuda refuses to start without CUDA (no silent fallback).",
    )
    variant: VariantChoice = Field(
        "auto", description="Graph variant: auto serves, among the bundle's variants for the provider (each passed "
        "its parity gate), the fastest batch-invariant one (a text's vector does not depend on its batch partners), "
        "by the speed and invariance measured at export and written in the manifest; /info says which and why. "
        "An explicit variant must exist and is served even when it is not batch-invariant (int8-dynamic).",
    )
    allow_int8: bool = Field(
        True, description="Let `variant=auto` choose an int8 graph: faster on CPU, but its vectors are within its "
        "parity gate (cosine >= 0.99) of PyTorch's, not equal to them; false keeps auto to the fp32 graphs.",
    )
    max_inputs: int = Field(256, ge=1, description="Most inputs in one request; more is refused with 422.")
    max_input_chars: int = Field(
        20_000, ge=1, description="Most characters in one input; bounds tokenisation cost before any work (422).",
    )
    max_chunked_input_chars: int = Field(
        100_000, ge=1, description="Most characters in one input of a request that asks for chunking (checked "
        "before tokenising, 422): about 25,000 English word pieces. A JSON body carries up to 6 bytes per "
        "character (\\uXXXX escapes), so keep payload_limit_bytes above 6 x this for one such input.",
    )
    max_windows_per_input: int = Field(
        512, ge=1, description="Most windows one chunked input may make (about tokens / (window - overlap)); more "
        "is refused with 422 before any work. Each window takes one admission permit and runs as one input.",
    )
    truncate: bool = Field(
        True, description="Default truncation: true cuts inputs to the model's max length; false refuses them (422). "
        "Requests may override it.",
    )
    max_batch_tokens: int = Field(
        16_384, ge=1, description="Token budget of one batch, counting padding (batch size x longest input). Larger "
        "batches raise throughput and latency and memory.",
    )
    max_batch_size: int = Field(64, ge=1, description="Most inputs in one batch, whatever their length.")
    max_queue: int = Field(
        2048, ge=1, description="Most inputs admitted (queued or running) at once, per served model; beyond it "
        "requests get 429 at once.",
    )
    queue_timeout_s: float = Field(
        30.0, gt=0, description="Seconds an input may wait in the queue; past it the request gets 504 and is not run.",
    )
    batch_wait_ms: float = Field(
        0.0, ge=0, description="Extra milliseconds the batcher waits for more inputs before running a batch that is "
        "not full, counted from the arrival of the oldest waiting input (a batch that fills meanwhile runs at "
        "once; inputs that waited behind a run do not wait again): a little more throughput under light load "
        "for a little more latency.",
    )
    attention_cap_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Largest /attention response (estimated before computing); bigger "
        "requests are refused with 422.",
    )
    embed_all_cap_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Largest /embed_all response (one vector per token; estimated before "
        "computing); bigger requests are refused with 422.",
    )
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
        "explorer's page and files (/explore) needs `Authorization: Bearer <key>` (401 otherwise).",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated origins allowed by CORS; empty means no CORS headers.",
    )
    log_format: Literal["text", "json"] = Field("text", description="Log lines as plain text or one JSON object each.")
    graph_runs: int = Field(
        1, ge=1, description="Graph runs in flight at once, each in its own thread with its own batch (the waiting "
        "inputs are shared out among free runs). More than 1 pipelines the runs and, with one intra-op thread "
        "each, spends less CPU per text (on 2 cores 2 runs x 1 thread took 10-30% less CPU per text than 1 x 2), "
        "but a lone request then runs on fewer cores, and on a shared 2-core machine served throughput and "
        "latency measured no better (docs/performance.md).",
    )
    intra_op_threads: int = Field(
        0, ge=0, description="onnxruntime intra-op threads of a graph session (the runs in flight share them); 0 "
        "means the CPU cores available to the process shared out among graph_runs (cores / graph_runs, at "
        "least 1).",
    )
    intra_op_spinning: bool = Field(
        False, description="Let onnxruntime's intra-op threads spin after a graph run instead of sleeping: a "
        "little less wake-up latency for the next run, but they burn the CPU the event loop needs to answer the "
        "batch's requests and parse the next ones (measured slower on a shared 2-core machine).",
    )
    graceful_timeout_s: float = Field(
        30.0, gt=0, description="On SIGTERM, seconds to finish admitted requests before the server exits.",
    )

    def session_threads(self) -> int:
        """Intra-op threads to open each graph session with."""
        return self.intra_op_threads or max(1, cpu_cores() // self.graph_runs)

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str | list):
            return _items(value)
        return value

    @field_validator("bundle", mode="before")
    @classmethod
    def _parse_bundles(cls, value: object) -> object:
        if isinstance(value, str | Path | list):
            return [_served_bundle(item) for item in _items(value)]
        return value

    @field_validator("bundle")
    @classmethod
    def _unique_names(cls, value: list[ServedBundle]) -> list[ServedBundle]:
        names = [b.name for b in value if b.name is not None]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"the model name {name!r} is given to more than one bundle")
        return value

    @property
    def bundle_dir(self) -> Path:
        """The first bundle's directory: the one `service.runtime.load_runtime` loads (see `for_bundle`)."""
        return self.bundle[0].path

    def for_bundle(self, bundle: ServedBundle) -> Settings:
        """These settings with `bundle` as the only one (to load it with `service.runtime.load_runtime`)."""
        return self.model_copy(update={"bundle": [bundle]})


def _items(value: str | Path | list[object]) -> list[object]:
    """The items of a value or list of values, strings split at commas (the environment's form, and what
    each repeated flag may hold)."""
    items: list[object] = []
    for value_ in value if isinstance(value, list) else [value]:
        if isinstance(value_, str):
            items += [item.strip() for item in value_.split(",") if item.strip()]
        else:
            items.append(value_)
    return items


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
