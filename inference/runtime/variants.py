"""Which provider and which graph variant a bundle is served with: pure functions of what onnxruntime
offers and what the manifest lists, so they are tested without a GPU.

The policy, stated once (README and /info repeat it):
- Exact variants (fp32, and fp32-opt: onnxruntime's fusions, gated at the same tolerance) are served by
  default; approximate ones (int8 and int8-dynamic on CPU, fp16 on CUDA) only when the operator asks:
  by name (`variant=int8`), or by letting `auto` consider them (`allow_approximate=true`).
- `auto` serves, among the usable variants the manifest lists for the provider (each passed its gate),
  the fastest batch-invariant one (a text's outputs do not depend on its batch partners), both as
  export measured them on that provider (manifest `measured`). No figures, no choice: a bundle without
  figures for the provider (a schema-1 bundle, or one exported on a CPU host and served on CUDA) is
  served with fp32, the reference graph, and the reason says so. So on a CUDA host a bundle exported on
  CPU serves fp32 on CUDA; fp16 is served there when named (`variant=fp16`), or by `auto` with
  `allow_approximate=true` when the bundle was exported on a CUDA host and fp16 measured faster.
- A variant named explicitly must exist for the provider, and is served even when it is not
  batch-invariant (int8-dynamic); its reason says so.
Nothing falls back silently: an explicit `cuda` without CUDA or an explicit variant the bundle lacks
is a `StartupError` naming what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bundle.manifest import Manifest, Measured
from bundle.session import ORT_PROVIDERS
from inference.errors import StartupError

EXACT = ("fp32", "fp32-opt")


@dataclass(frozen=True)
class VariantChoice:
    variant: str
    reason: str  # for /info and the start-up log: why this variant, with the figures it was chosen by


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


def choose_variant(requested: str, provider: str, manifest: Manifest, allow_approximate: bool = False) -> VariantChoice:
    """The fast graph to serve, and why (see the module's policy)."""
    usable = usable_variants(manifest, "fast", provider)
    if requested == "auto":
        return auto_variant(manifest, provider, usable, allow_approximate)
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


def auto_variant(manifest: Manifest, provider: str, usable: Sequence[str], allow_approximate: bool) -> VariantChoice:
    """Among the usable variants with figures for `provider`, the batch-invariant ones (exact ones only unless
    `allow_approximate`), by the lowest geometric mean time per batch over the measured shapes."""
    figures = {v: m for v in usable if (m := _measured(manifest, v, provider)) is not None}
    left_out = {v: f"not batch-invariant ({m.batch_max_abs_diff:.2g})" for v, m in figures.items()
                if not m.batch_invariant}
    if not allow_approximate:
        left_out |= {v: "approximate; ATTNSERVE_ALLOW_APPROXIMATE=false" for v in figures if v not in EXACT}
    invariant = {v: m for v, m in figures.items() if v not in left_out}
    if len(invariant) == 1 and len(usable) == 1:  # export times only graphs it has to choose between
        return VariantChoice(usable[0], f"the one fast graph for {provider} in this bundle, batch-invariant")
    candidates = {v: m for v, m in invariant.items() if m.ms_per_batch}
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
    """'fastest batch-invariant variant measured at export on cpu: fp32-opt 1311/155.3 ms per 32x128/32x16 batch
    (1.10x/1.21x fp32, process cpu time); then fp32 ...; left out: int8 (approximate; ...)'"""
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
