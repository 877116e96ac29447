"""The runtime: verify the bundle, choose the provider and the graph variants, open the sessions.

The choices are pure functions of what onnxruntime offers and what the manifest lists, so they are
tested without a GPU. Nothing falls back silently: an explicit `cuda` without CUDA, an explicit variant
the bundle lacks or an invalid bundle stops start-up with a `StartupError` naming what is wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from bundle.manifest import GraphEntry, Manifest
from bundle.session import ORT_PROVIDERS, open_session
from service.runner import TOKENS, BatchRunner, OrtRunner, Outputs
from service.settings import Settings
from service.tokenize import TextTokenizer

log = logging.getLogger(__name__)

# Fastest first; a variant is only in a bundle when it passed its parity gate at export time.
PREFERENCE = {"cuda": ("fp16", "fp32-opt", "fp32"), "cpu": ("int8", "fp32-opt", "fp32")}


class StartupError(Exception):
    """The service cannot start; the message names the file, field or setting at fault."""


@dataclass
class Runtime:
    manifest: Manifest
    tokenizer: TextTokenizer
    runners: dict[str, BatchRunner]  # graph kind -> runner
    provider: str
    variants: dict[str, str] = field(default_factory=dict)  # graph kind -> variant

    def run_batch(self, kind: str, sequences: list[np.ndarray]) -> list[Outputs]:
        return self.runners[kind].run(sequences)


def choose_provider(requested: str, available: Sequence[str]) -> str:
    has_cuda = ORT_PROVIDERS["cuda"] in available
    if requested == "cuda" and not has_cuda:
        raise StartupError(
            "provider 'cuda' was asked for (ATTNSERVE_PROVIDER) but onnxruntime offers only "
            f"{', '.join(available)}; install onnxruntime-gpu on a CUDA host or use provider 'cpu'"
        )
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    return requested


def usable_variants(manifest: Manifest, kind: str, provider: str) -> list[str]:
    ort_name = ORT_PROVIDERS[provider]
    return [g.variant for g in manifest.graphs if g.kind == kind and (not g.providers or ort_name in g.providers)]


def choose_variant(requested: str, provider: str, manifest: Manifest, allow_int8: bool = True) -> str:
    usable = usable_variants(manifest, "fast", provider)
    if requested != "auto":
        if requested not in usable:
            raise StartupError(
                f"variant {requested!r} (ATTNSERVE_VARIANT) has no 'fast' graph for provider {provider} in "
                f"manifest.json graphs; available: {', '.join(usable) or 'none'}"
            )
        return requested
    order = [v for v in PREFERENCE[provider] if allow_int8 or v != "int8"]
    for variant in order:
        if variant in usable:
            return variant
    raise StartupError(f"manifest.json graphs has no 'fast' graph usable on provider {provider}")


def choose_attention_variant(fast_variant: str, provider: str, manifest: Manifest) -> str | None:
    """The attention graph: the same variant as the fast one when present, else the fastest usable."""
    usable = usable_variants(manifest, "attention", provider)
    if fast_variant in usable:
        return fast_variant
    return next((v for v in PREFERENCE[provider] if v in usable), None)


def verify(bundle_dir: Path) -> Manifest:
    from bundle.verify import BundleError, verify_bundle  # the bundle's own checker; imports no torch

    try:
        return verify_bundle(bundle_dir)
    except BundleError as error:
        raise StartupError(f"invalid bundle {bundle_dir}: {error}") from None


def load_runtime(settings: Settings) -> Runtime:
    import onnxruntime as ort

    manifest = verify(settings.bundle)
    provider = choose_provider(settings.provider, ort.get_available_providers())
    runtime = _open(settings, manifest, provider)
    if provider == "cuda" and runtime.provider != "cuda":
        if settings.provider == "cuda":
            raise StartupError("provider 'cuda' was asked for but the onnxruntime session did not run on CUDA")
        log.warning("CUDA is offered but a session did not run on it; serving on CPU")
        runtime = _open(settings, manifest, "cpu")
    log.info("serving %s %s on %s, variants %s", manifest.name, manifest.version, runtime.provider, runtime.variants)
    return runtime


def _open(settings: Settings, manifest: Manifest, provider: str) -> Runtime:
    variants = {"fast": choose_variant(settings.variant, provider, manifest, settings.allow_int8)}
    attention = choose_attention_variant(variants["fast"], provider, manifest)
    if attention is not None:
        variants["attention"] = attention
    runners = {kind: _runner(settings, manifest, kind, variant, provider) for kind, variant in variants.items()}
    tokenizer = _tokenizer(settings.bundle, manifest)
    probe = tokenizer.encode(["warm up"], truncate=True)[0].ids
    for kind, runner in runners.items():
        _smoke_run(runner, probe, manifest.graph(kind, variants[kind]))
    ran_on = "cuda" if all(ORT_PROVIDERS["cuda"] == r.providers[0] for r in runners.values()) else "cpu"
    fast = manifest.graph("fast", variants["fast"])
    if fast is not None and "token_embeddings" in {o.name for o in fast.outputs}:  # /embed_all: same session
        runners[TOKENS] = runners["fast"].with_outputs(["token_embeddings"])
    return Runtime(manifest, tokenizer, dict(runners), ran_on, variants)


def _smoke_run(runner: OrtRunner, probe: np.ndarray, entry: GraphEntry | None) -> None:
    """One real run before serving: a graph that loads but cannot run stops start-up, naming its file."""
    try:
        runner.run([probe])
    except Exception as error:  # onnxruntime raises its own types
        name = entry.file if entry is not None else "graph"
        raise StartupError(f"{name}: a first run failed ({type(error).__name__}: {str(error)[:200]})") from None


def _tokenizer(bundle: Path, manifest: Manifest) -> TextTokenizer:
    try:
        return TextTokenizer(Tokenizer.from_file(str(bundle / manifest.tokenizer)), manifest.max_length)
    except Exception as error:  # tokenizers raises a bare Exception; name the file, keep the reason
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise StartupError(f"{manifest.tokenizer}: the tokenizers library cannot load it: {reason}") from None


def _runner(settings: Settings, manifest: Manifest, kind: str, variant: str, provider: str) -> OrtRunner:
    entry = manifest.graph(kind, variant)
    assert entry is not None  # chosen from the manifest's own list
    outputs = ["attentions"] if kind == "attention" else ["embeddings"] + (["logits"] if manifest.labels else [])
    pad_id = int(manifest.model_config_.get("pad_token_id", 0))
    try:
        session = open_session(settings.bundle / entry.file, provider, settings.session_threads(),
                               settings.intra_op_spinning)
    except Exception as error:  # onnxruntime raises its own types; name the file, keep the reason
        raise StartupError(f"{entry.file}: onnxruntime cannot load it ({type(error).__name__})") from error
    return OrtRunner(session, outputs, pad_id)
