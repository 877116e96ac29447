"""What a caller of the core chooses, each knob with the trade-off it sets: how a bundle is opened
(`LoadOptions`), how inputs are batched (`BatchOptions`), what one request may ask (`RequestLimits`), and
how much the answers cache may hold (`CacheOptions`).

The HTTP settings (`service.settings.Settings`) add the server's own knobs to `ServingOptions`; the corpus
job takes `LoadOptions` and a few batch sizes; the bench takes `LoadOptions`. The descriptions here are the
ones `--help` and the environment's documentation show.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from pydantic_settings import BaseSettings, SettingsConfigDict

from bundle.session import cpu_cores

Provider = Literal["auto", "cuda", "cpu"]
VariantName = Literal["auto", "fp32", "fp32-opt", "int8", "int8-dynamic", "fp16"]
ENV_PREFIX = "ATTNSERVE_"
# The default character caps of a served model (RequestLimits.for_model; docs/input-caps.md measures the figures): a
# token of English prose is 4 to 5 characters, of code 3 to 4, of CJK 1 to 2; 8 a token lets a document that fills
# the model's max length through, whitespace and long words too. The floors are the caps every model had before
# they followed the model: a short model truncates a longer text (or refuses it with truncate off) as before.
CHARS_PER_TOKEN = 8
MIN_INPUT_CHARS = 20_000
MIN_CHUNKED_INPUT_CHARS = 100_000
O = TypeVar("O", bound=BaseModel)


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadOptions(_Options):
    provider: Provider = Field(
        "auto", description="onnxruntime provider: auto uses CUDA when a session really runs on it, else CPU; "
        "cuda refuses to start without CUDA (no silent fallback).",
    )
    variant: VariantName = Field(
        "auto", description="Graph variant: auto serves, among the bundle's variants for the provider (each passed "
        "its parity gate), the fastest exact (fp32, fp32-opt) batch-invariant one (a text's vector does not "
        "depend on its batch partners), by the speed and invariance measured at export and written in the "
        "manifest, and fp32 when the bundle has no figures for the provider; /info says which and why. An "
        "explicit variant must exist and is served even when it is not batch-invariant (int8-dynamic).",
    )
    allow_approximate: bool = Field(
        False, description="Let `variant=auto` choose an approximate graph (int8 on CPU, fp16 on CUDA) when it is "
        "the fastest: faster, but its vectors are within its parity gate (int8: cosine >= 0.99, fp16: >= 0.999) "
        "of PyTorch's, not equal to them. Off by default: auto serves exact graphs (fp32, fp32-opt).",
    )
    graph_runs: int = Field(
        1, ge=1, description="Graph runs in flight at once, each in its own thread with its own batch (the waiting "
        "inputs are shared out among free runs). More than 1 pipelines the runs and, with one intra-op thread "
        "each, spends less CPU per text, but a lone request then runs on fewer cores (docs/performance.md).",
    )
    intra_op_threads: int = Field(
        0, ge=0, description="onnxruntime intra-op threads of a graph session (the runs in flight share them); 0 "
        "means the CPU cores available to the process shared out among graph_runs (cores / graph_runs, at "
        "least 1).",
    )
    intra_op_spinning: bool = Field(
        False, description="Let onnxruntime's intra-op threads keep spinning after a graph run instead of sleeping "
        "(they spin between a run's operators either way): a little less wake-up latency for the next run, but "
        "they burn the CPU the event loop needs to answer the batch's requests and parse the next ones.",
    )

    def session_threads(self) -> int:
        """Intra-op threads to open each graph session with."""
        return self.intra_op_threads or max(1, cpu_cores() // self.graph_runs)


class BatchOptions(_Options):
    max_batch_tokens: int = Field(
        4_096, ge=1, description="Token budget of one batch, counting padding (batch size x longest input); an "
        "input longer than it runs alone. On CPU, larger batches cost about the same per text and hold more memory "
        "(docs/performance.md measures both).",
    )
    max_batch_size: int = Field(64, ge=1, description="Most inputs in one batch, whatever their length.")
    max_queue: int = Field(
        2048, ge=1, description="Most inputs admitted (queued or running) at once, per served model; beyond it "
        "requests are refused at once (429).",
    )
    queue_timeout_s: float = Field(
        30.0, gt=0, description="Seconds an input may wait in the queue; past it the request fails (504) and is "
        "not run.",
    )
    batch_wait_ms: float = Field(
        0.0, ge=0, description="Extra milliseconds the batcher waits for more inputs before running a batch that is "
        "not full, counted from the arrival of the oldest waiting input (a batch that fills meanwhile runs at "
        "once; inputs that waited behind a run do not wait again): a little more throughput under light load "
        "for a little more latency.",
    )
    bulk_share: float = Field(
        0.2, gt=0, lt=1, description="Share of the graph time that bulk inputs keep while interactive ones wait "
        "too (counted in padded tokens, batch size x longest input): interactive inputs go ahead of queued bulk "
        "ones, yet bulk never starves. Between callers of one class the time is shared by tokens.",
    )
    interactive_lane: bool = Field(
        True, description="Keep one more graph thread for interactive inputs (one, shared by the served models): "
        "while every run slot holds a bulk batch, an interactive batch runs at once beside them on it (a run "
        "cannot be interrupted, and a bulk batch can take a second). For that long the runs share the cores. "
        "Off: interactive inputs wait for a slot.",
    )
    bulk_nice: int = Field(
        19, ge=0, le=19, description="How much lower the CPU priority of the threads that run bulk batches and "
        "tokenise bulk requests is (Linux nice, per thread; 0: the same as the rest). With every core busy, the "
        "event loop and interactive work then get a core first, and bulk work still runs at full speed on cores "
        "nothing else wants (docs/reliability.md measures the event loop's waits for a core under bulk load). "
        "onnxruntime's own intra-op worker threads (intra_op_threads above 1) serve every run and keep the normal "
        "priority.",
    )
    bulk_idle_policy: bool = Field(
        True, description="Run the bulk threads (those bulk_nice lowers) under Linux's SCHED_IDLE policy too "
        "(when bulk_nice is above 0): a niced thread keeps its core until its time slice ends when the event loop "
        "or the interactive lane wakes, an idle-policy thread gives it up at once, which lowers the interactive "
        "p99 under bulk load (docs/reliability.md measures it). Elsewhere than Linux, or where the kernel refuses "
        "it, the bulk threads keep the nice value alone.",
    )
    bulk_queue_share: float = Field(
        0.5, gt=0, le=1, description="Share of max_queue that bulk inputs may hold at once; bulk requests beyond "
        "it are refused (429), so bulk callers alone never fill the queue interactive calls need.",
    )


class RequestLimits(_Options):
    max_inputs: int = Field(256, ge=1, description="Most inputs in one request; more is refused (422).")
    max_input_chars: int | None = Field(
        None, ge=1, description="Most characters in one input; bounds tokenisation cost before any work (422). "
        f"Unset: per served model, its max length x {CHARS_PER_TOKEN} characters per token (English prose runs 4 to "
        f"5 a token, CJK 1 to 2: docs/input-caps.md), and at least {MIN_INPUT_CHARS:,}: room for prose, code or CJK "
        "that fills the model. Set: that many for every model.",
    )
    max_chunked_input_chars: int | None = Field(
        None, ge=1, description="Most characters in one input of a request that asks for chunking (checked "
        f"before tokenising, 422). Unset: {MIN_CHUNKED_INPUT_CHARS:,} (about 25,000 English word pieces), or the "
        "model's max_input_chars where that is larger. A JSON body carries up to 6 bytes per character (\\uXXXX "
        "escapes), so keep payload_limit_bytes above 6 x this for one such input.",
    )
    max_windows_per_input: int = Field(
        512, ge=1, description="Most windows one chunked input may make (about tokens / (window - overlap)); more "
        "is refused (422) before any work. Each window takes one admission permit and runs as one input.",
    )
    truncate: bool = Field(
        True, description="Default truncation: true cuts inputs to the model's max length; false refuses them (422). "
        "Requests may override it.",
    )
    attention_cap_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Largest attention answer (estimated before computing); bigger "
        "requests are refused (422).",
    )
    attention_graph_cap_bytes: int = Field(
        2 * 1024 * 1024 * 1024, ge=1, description="Largest set of maps the attention graph may compute for one "
        "request: the (T, T) maps of the layers and heads asked for, of every input (inputs x layers x heads x T^2 x 4 "
        "bytes; an attention graph exported before it took a choice computes every layer's and head's, whatever "
        "is asked for); a request over it is refused (422) before any graph runs, and ask for fewer layers and "
        "heads to stay under it. Long inputs are served by the fast graph, which streams its attention "
        "(docs/performance.md).",
    )
    embed_all_cap_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Largest per-token answer (/embed_all: one vector per token; estimated "
        "before computing); bigger requests are refused (422).",
    )
    max_image_bytes: int = Field(
        20 * 1024 * 1024, ge=1, description="Most bytes of one image as sent (after base64 decoding), checked before "
        "it is decoded (422 image_too_large). An image model's requests only; max_inputs caps the images of one "
        "request.",
    )
    max_image_pixels: int = Field(
        40_000_000, ge=1, description="Most pixels (width x height) of one image, read from its header before a "
        "pixel is decoded, so a small file that decodes to a huge picture (a decompression bomb) is refused (422 "
        "image_too_large). 40 megapixels: a 7,300 x 5,500 photograph, 120 MB decoded.",
    )
    _default_for: int | None = PrivateAttr(None)  # for_model: the max length max_input_chars is the default of

    def for_model(self, max_length: int) -> RequestLimits:
        """These limits for a model of `max_length` tokens: each character cap left unset is its default for that
        model, the one rule for every caller (`inference.served.ServedModel` resolves its own once)."""
        plain = self.max_input_chars or max(MIN_INPUT_CHARS, max_length * CHARS_PER_TOKEN)
        chunked = self.max_chunked_input_chars or max(MIN_CHUNKED_INPUT_CHARS, plain)
        resolved = self.model_copy(update={"max_input_chars": plain, "max_chunked_input_chars": chunked})
        resolved._default_for = self._default_for if self.max_input_chars else max_length
        return resolved

    def input_chars_source(self) -> str:
        """Where max_input_chars comes from, for a refusal: the setting, or the default for the model's length."""
        setting = f"{ENV_PREFIX}MAX_INPUT_CHARS"
        if self._default_for is None:
            return setting
        return f"the default for a model of {self._default_for:,} tokens; {setting} sets another"


class CacheOptions(_Options):
    cache_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="Bytes of the exact embedding cache, shared by the served models "
        "(least recently used out first; 0 turns it off: every input runs, repeats too). Keyed by the model's "
        "fingerprint, the input's token ids and the output kind, so a hit is the vector the graph returned for "
        "that input, bit for bit, and skips the queue; a repeat within a request, or of an input another request "
        "is running, runs once. It keeps the token ids of the texts it saw too, so a text seen before is not "
        "tokenised again. Attention maps are not cached.",
    )


class ServingOptions(LoadOptions, BatchOptions, RequestLimits, CacheOptions):
    """Everything the core needs to serve models: how they are opened, batched, limited and cached."""

    def load_options(self) -> LoadOptions:
        return LoadOptions(**self.model_dump(include=set(LoadOptions.model_fields)))

    def batch_options(self) -> BatchOptions:
        return BatchOptions(**self.model_dump(include=set(BatchOptions.model_fields)))

    def request_limits(self) -> RequestLimits:
        return RequestLimits(**self.model_dump(include=set(RequestLimits.model_fields)))


def from_environment(options: type[O], **given: Any) -> O:
    """`options` from what is `given`, the rest from the ATTNSERVE_* variables (given values win), the rest
    defaults: how a command line reads the same knobs as the server."""

    class FromEnvironment(options, BaseSettings):  # type: ignore[valid-type,misc]
        model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    return options(**FromEnvironment(**given).model_dump())
