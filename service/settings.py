"""Service settings: one typed knob per trade-off, read from the environment (ATTNSERVE_*) or CLI flags.

Nothing is read at import time: `Settings()` reads the environment when the CLI (or a test) builds it,
and the result is passed into `create_app(settings)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bundle.session import cpu_cores

Provider = Literal["auto", "cuda", "cpu"]
VariantChoice = Literal["auto", "fp32", "fp32-opt", "int8", "fp16"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="forbid", frozen=True)

    bundle: Path = Field(
        description="Bundle directory (manifest.json, tokenizer.json, *.onnx) made by `attnserve export`.",
    )
    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 exposes the service beyond this machine.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    provider: Provider = Field(
        "auto", description="onnxruntime provider: auto uses CUDA when a session really runs on it, else CPU; "
        "cuda refuses to start without CUDA (no silent fallback).",
    )
    variant: VariantChoice = Field(
        "auto", description="Graph variant: auto picks the fastest variant in the bundle that passed its parity gate "
        "for the provider (fp16 on CUDA; int8, then fp32-opt, then fp32 on CPU). An explicit variant must exist.",
    )
    allow_int8: bool = Field(
        True, description="Let `variant=auto` choose the int8 graph on CPU (faster; small accuracy loss, within "
        "its parity gate).",
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
        2048, ge=1, description="Most inputs admitted (queued or running) at once; beyond it requests get 429 at once.",
    )
    queue_timeout_s: float = Field(
        30.0, gt=0, description="Seconds an input may wait in the queue; past it the request gets 504 and is not run.",
    )
    batch_wait_ms: float = Field(
        0.0, ge=0, description="Extra milliseconds the batcher waits for more inputs before running a batch that is "
        "not full (a batch that fills meanwhile runs at once): a little more throughput under light load for a "
        "little more latency.",
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
        None, description="When set, every route except /health, /ready and /metrics needs "
        "`Authorization: Bearer <key>` (401 otherwise).",
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
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value
