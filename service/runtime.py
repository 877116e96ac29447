"""The runtime: verify the bundle, choose the provider and the graph variants, open the sessions.

The choices are pure functions of what onnxruntime offers and what the manifest lists, so they are
tested without a GPU. `variant=auto` serves the fastest variant whose outputs do not depend on their
batch partners, both as export measured them (manifest `measured`), never a fixed preference list; a
variant that is not batch-invariant (int8-dynamic) is served only when asked for by name. Nothing falls
back silently: an explicit `cuda` without CUDA, an explicit variant the bundle lacks or an invalid bundle
stops start-up with a `StartupError` naming what is wrong.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tokenizers import Tokenizer

from bundle.manifest import GraphEntry, Manifest, Measured
from bundle.session import ORT_PROVIDERS, open_session
from service.runner import TOKENS, BatchRunner, OrtRunner, Outputs
from service.settings import Settings
from service.tokenize import TextTokenizer

log = logging.getLogger(__name__)

T = TypeVar("T")
# What one load has opened, by content (a graph's or tokenizer's sha256): bundles listing the same file
# share one session / tokenizer instead of holding a copy each.
Opened = dict[tuple[str, ...], Any]


class StartupError(Exception):
    """The service cannot start; the message names the file, field or setting at fault."""


@dataclass(frozen=True)
class VariantChoice:
    variant: str
    reason: str  # for /info and the start-up log: why this variant, with the figures it was chosen by


@dataclass
class Runtime:
    manifest: Manifest
    tokenizer: TextTokenizer
    runners: dict[str, BatchRunner]  # graph kind -> runner
    provider: str
    variants: dict[str, str] = field(default_factory=dict)  # graph kind -> variant
    variant_reason: str = ""  # why the fast graph's variant was chosen (VariantChoice.reason)

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


def choose_variant(requested: str, provider: str, manifest: Manifest, allow_int8: bool = True) -> VariantChoice:
    """The fast graph to serve, and why. An explicit name is served as asked (it must exist); `auto` serves
    the fastest batch-invariant variant by the speed export measured on this provider (see auto_variant)."""
    usable = usable_variants(manifest, "fast", provider)
    if requested == "auto":
        return auto_variant(manifest, provider, usable, allow_int8)
    if requested not in usable:
        raise StartupError(
            f"variant {requested!r} (ATTNSERVE_VARIANT) has no 'fast' graph for provider {provider} in "
            f"manifest.json graphs; available: {', '.join(usable) or 'none'}"
        )
    figures = _measured(manifest, requested, provider)
    if figures is None:
        return VariantChoice(requested, f"asked for by name; not measured for batch invariance on {provider}")
    if not figures.batch_invariant:
        return VariantChoice(requested, f"asked for by name; NOT batch-invariant: a text's outputs move by up to "
                             f"{figures.batch_max_abs_diff:.2g} with its batch partners")
    return VariantChoice(requested, "asked for by name; batch-invariant")


def auto_variant(manifest: Manifest, provider: str, usable: Sequence[str], allow_int8: bool) -> VariantChoice:
    """Among the usable variants that passed their gate (only those are in a bundle), keep the batch-invariant
    ones (measured at export), and int8 only when allowed; serve the one with the lowest geometric mean time
    per batch over the measured shapes. Without figures (a schema-1 bundle) fp32, the reference graph."""
    figures = {v: m for v in usable if (m := _measured(manifest, v, provider)) is not None}
    left_out = {v: f"not batch-invariant ({m.batch_max_abs_diff:.2g})" for v, m in figures.items()
                if not m.batch_invariant}
    if not allow_int8:
        left_out |= {v: "ATTNSERVE_ALLOW_INT8=false" for v in figures if v.startswith("int8")}
    candidates = {v: m for v, m in figures.items() if v not in left_out and m.ms_per_batch}
    if not candidates:
        if "fp32" not in usable:
            raise StartupError(f"manifest.json graphs has no 'fast' graph usable on provider {provider}")
        return VariantChoice("fp32", f"no batch-invariant variant with export-time speed figures on {provider} "
                             "in this bundle; fp32 is the reference graph")
    shapes = sorted(set.intersection(*(set(m.ms_per_batch) for m in candidates.values())))
    ranked = sorted(candidates, key=lambda v: _geometric_mean([candidates[v].ms_per_batch[s] for s in shapes]))
    return VariantChoice(ranked[0], _reason(ranked, candidates, shapes, left_out, provider))


def _reason(ranked: list[str], figures: dict[str, Measured], shapes: list[str], left_out: dict[str, str],
            provider: str) -> str:
    """'fastest batch-invariant variant measured at export on cpu: int8 1169/114.4 ms per 32x128/32x16 batch
    (1.22x/1.37x fp32, process cpu time); then fp32-opt 1311/155.3 ms, fp32 ...; left out: ...'"""
    def times(v: str) -> str:
        return "/".join(f"{figures[v].ms_per_batch[s]:.4g}" for s in shapes)

    best = figures[ranked[0]]
    text = f"fastest batch-invariant variant measured at export on {provider}: {ranked[0]} {times(ranked[0])} ms "
    text += f"per {'/'.join(shapes)} batch ("
    if "fp32" in figures and ranked[0] != "fp32":
        ratios = [figures["fp32"].ms_per_batch[s] / max(best.ms_per_batch[s], 1e-9) for s in shapes]
        text += "/".join(f"{r:.2f}x" for r in ratios) + " fp32, "
    text += f"{best.clock.replace('_', ' ')} time)"
    if len(ranked) > 1:
        text += "; then " + ", ".join(f"{v} {times(v)} ms" for v in ranked[1:])
    if left_out:
        text += "; left out: " + ", ".join(f"{v} ({why})" for v, why in left_out.items())
    return text


def _measured(manifest: Manifest, variant: str, provider: str) -> Measured | None:
    entry = manifest.graph("fast", variant)
    return entry.measured.get(provider) if entry is not None else None


def _geometric_mean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values))


def choose_attention_variant(fast_variant: str, provider: str, manifest: Manifest) -> str | None:
    """The attention graph: the same variant as the fast one when present, else fp32 (the reference)."""
    usable = usable_variants(manifest, "attention", provider)
    return next((v for v in (fast_variant, "fp32") if v in usable), None)


def verify(bundle_dir: Path) -> Manifest:
    from bundle.verify import BundleError, verify_bundle  # the bundle's own checker; imports no torch

    try:
        return verify_bundle(bundle_dir)
    except BundleError as error:
        raise StartupError(f"invalid bundle {bundle_dir}: {error}") from None


def load_runtime(settings: Settings, opened: Opened | None = None) -> Runtime:
    """The runtime of `settings.bundle_dir`, the first bundle (`service.models.load_runtimes` loads them all,
    sharing `opened` between them)."""
    import onnxruntime as ort

    opened = {} if opened is None else opened
    manifest = verify(settings.bundle_dir)
    provider = choose_provider(settings.provider, ort.get_available_providers())
    runtime = _open(settings, manifest, provider, opened)
    if provider == "cuda" and runtime.provider != "cuda":
        if settings.provider == "cuda":
            raise StartupError("provider 'cuda' was asked for but the onnxruntime session did not run on CUDA")
        log.warning("CUDA is offered but a session did not run on it; serving on CPU")
        runtime = _open(settings, manifest, "cpu", opened)
    log.info("serving %s %s on %s, variants %s: %s", manifest.name, manifest.version, runtime.provider,
             runtime.variants, runtime.variant_reason)
    return runtime


def _open(settings: Settings, manifest: Manifest, provider: str, opened: Opened) -> Runtime:
    choice = choose_variant(settings.variant, provider, manifest, settings.allow_int8)
    variants = {"fast": choice.variant}
    attention = choose_attention_variant(variants["fast"], provider, manifest)
    if attention is not None:
        variants["attention"] = attention
    runners = {kind: _runner(settings, manifest, kind, v, provider, opened) for kind, v in variants.items()}
    tokenizer = _once(opened, ("tokenizer", manifest.tokenizer_sha256, str(manifest.max_length)),
                      lambda: load_tokenizer(settings.bundle_dir, manifest))
    probe = tokenizer.encode(["warm up"], truncate=True)[0].ids
    for kind, runner in runners.items():
        _smoke_run(runner, probe, manifest.graph(kind, variants[kind]))
    ran_on = "cuda" if all(ORT_PROVIDERS["cuda"] == r.providers[0] for r in runners.values()) else "cpu"
    fast = manifest.graph("fast", variants["fast"])
    if fast is not None and "token_embeddings" in {o.name for o in fast.outputs}:  # /embed_all: same session
        runners[TOKENS] = runners["fast"].with_outputs(["token_embeddings"])
    return Runtime(manifest, tokenizer, dict(runners), ran_on, variants, choice.reason)


def _smoke_run(runner: OrtRunner, probe: np.ndarray, entry: GraphEntry | None) -> None:
    """One real run before serving: a graph that loads but cannot run stops start-up, naming its file."""
    try:
        runner.run([probe])
    except Exception as error:  # onnxruntime raises its own types
        name = entry.file if entry is not None else "graph"
        raise StartupError(f"{name}: a first run failed ({type(error).__name__}: {str(error)[:200]})") from None


def load_tokenizer(bundle: Path, manifest: Manifest) -> TextTokenizer:
    """The bundle's tokenizer alone, truncating at its max length; StartupError names the file it cannot load."""
    try:
        return TextTokenizer(Tokenizer.from_file(str(bundle / manifest.tokenizer)), manifest.max_length)
    except Exception as error:  # tokenizers raises a bare Exception; name the file, keep the reason
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        raise StartupError(f"{manifest.tokenizer}: the tokenizers library cannot load it: {reason}") from None


def _once(opened: Opened, key: tuple[str, ...], make: Callable[[], T]) -> T:
    """`make()`, or what an earlier bundle of the same load made for the same key (the same file content)."""
    if key not in opened:
        opened[key] = make()
    return opened[key]  # type: ignore[no-any-return]


def _runner(
    settings: Settings, manifest: Manifest, kind: str, variant: str, provider: str, opened: Opened,
) -> OrtRunner:
    entry = manifest.graph(kind, variant)
    assert entry is not None  # chosen from the manifest's own list
    outputs = ["attentions"] if kind == "attention" else ["embeddings"] + (["logits"] if manifest.labels else [])
    pad_id = int(manifest.model_config_.get("pad_token_id", 0))
    session = _once(opened, ("session", entry.sha256, provider), lambda: _session(settings, entry, provider))
    return OrtRunner(session, outputs, pad_id)


def _session(settings: Settings, entry: GraphEntry, provider: str) -> Any:
    try:
        session = open_session(settings.bundle_dir / entry.file, provider, settings.session_threads(),
                               settings.intra_op_spinning)
    except Exception as error:  # onnxruntime raises its own types; name the file, keep the reason
        raise StartupError(f"{entry.file}: onnxruntime cannot load it ({type(error).__name__})") from error
    return session
