"""A bundle loaded for serving: verified, its provider and graph variants chosen (`inference.runtime.variants`),
its tokenizer and the sessions of the graph kinds the caller asks for opened, and each graph run once.

Bundles loaded together share what has the same content: graphs and tokenizers with the same sha256 are
opened once (`Opened`), so two bundles of one model hold one session, and the tensors graphs read from data files
are held once for all of them (`bundle.weights`: a bundle's fast and attention fp32 graphs read one data file),
their pages given back once the graphs have run (`Weights.release`).
A graph that loads but cannot run, a tokenizer the library cannot read, or an invalid bundle stops the load with a
`StartupError` naming it.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bundle.manifest import GraphEntry, Manifest
from bundle.preprocessing import ImageProcessing
from bundle.session import ORT_PROVIDERS, cuda_unavailable_reason, open_session, shrinking_run
from bundle.weights import Weights
from inference.errors import InvalidImage, StartupError, Unsupported
from inference.options import LoadOptions
from inference.runtime.graphs import (
    MULTI,
    MULTI_OUTPUTS,
    PAIRS,
    SPARSE,
    TOKEN_LOGITS,
    TOKENS,
    VIEWS,
    BatchKind,
    Graph,
    ImageSequence,
    Input,
    Outputs,
    TokenSequence,
)
from inference.runtime.images import load_processing, pixel_values
from inference.runtime.tokenize import TextTokenizer, load_tokenizer
from inference.runtime.variants import choose_attention_variant, choose_provider, choose_variant

log = logging.getLogger(__name__)

T = TypeVar("T")
KINDS = ("fast", "attention")
# What one load has opened, by content (a graph's or tokenizer's sha256): bundles listing the same file
# share one session / tokenizer instead of holding a copy each.
Opened = dict[tuple[str, ...], Any]


@dataclass
class LoadedBundle:
    manifest: Manifest
    text_tokenizer: TextTokenizer | None  # None: an image model (see `tokenizer`, `images`)
    graphs: dict[str, Graph]  # graph kind -> graph (the VIEWS kinds: the fast graph's session, one output each)
    provider: str  # where the sessions run: "cpu" or "cuda"
    variants: dict[str, str] = field(default_factory=dict)  # graph kind -> variant
    variant_reason: str = ""  # why the fast graph's variant was chosen
    images: ImageProcessing | None = None  # an image model's steps from bytes to pixel values (its bundle's file)
    image_tower: LoadedBundle | None = None  # a two-tower model's (CLIP, SigLIP) image encoder: its own bundle
    weights: Weights | None = None  # the mapped data files the sessions read, shared by every bundle of a load

    @property
    def modalities(self) -> tuple[str, ...]:
        """What the model reads: text, image, or both (a two-tower model: texts here, images by its image tower)."""
        return (self.manifest.modality,) + (("image",) if self.image_tower is not None else ())

    @property
    def tokenizer(self) -> TextTokenizer:
        """The text model's tokenizer; Unsupported (422) for an image model, which is sent images."""
        if self.text_tokenizer is None:
            raise Unsupported(f"{self.manifest.name} is an image model: it embeds images, not texts or token ids "
                              "(send images: docs/vision.md)")
        return self.text_tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: TextTokenizer) -> None:  # a test's spy around the tokenizer
        self.text_tokenizer = tokenizer

    def release_pages(self) -> None:
        """Give back the resident pages of the mapped weights (`bundle.weights.Weights.release`) and the heap's free
        pages (trim_heap), once the sessions have packed what they pack and have run: after the load's first runs,
        and after the served model's warm-up (its attention graph's run reads every weight)."""
        if self.weights is not None:
            self.weights.release()
        trim_heap()

    def shrink_arenas(self) -> None:
        """One short run of each session that gives back its CPU arena's free chunks as it ends
        (bundle.session.shrinking_run): after the served model's warm-up, whose batch of 8 x 128 tokens grew each
        arena to what a lone request never needs (on a Qwen3-0.6B-shaped bundle, 145 MB; docs/performance.md).
        Outside the batcher's run slots, before the model counts as ready; a session another served name shares may
        be running meanwhile, and its arena frees only the chunks no run holds."""
        probe, options = _probe(self.manifest, self.text_tokenizer), shrinking_run()
        for graph in {id(g.session): g for g in self.graphs.values()}.values():  # views share the fast session
            graph.run([probe], options=options)

    def image_input(self, pixels: np.ndarray) -> ImageSequence:
        """One prepared image as the batcher queues it, with the tokens it becomes."""
        assert self.manifest.image is not None
        return ImageSequence(pixels, self.manifest.image.tokens)

    def prepare_images(self, images: Sequence[bytes], max_pixels: int, name: str) -> list[Input]:
        """Each image's pixel values by the bundle's steps (inference/runtime/images.py), as the batcher queues them;
        InvalidImage naming the input, Unsupported for a text model (served as `name`)."""
        if self.images is None:  # a text model's own: inference.tasks send images to `ServedModel.for_images()`
            raise Unsupported(f"model {name} reads texts, not images; an image model embeds images "
                              "(GET /info lists each model's modality)")
        out: list[Input] = []
        for index, data in enumerate(images):
            try:
                out.append(self.image_input(pixel_values(data, self.images, max_pixels)))
            except InvalidImage as error:
                raise InvalidImage(f"input {index}: {error}", code=error.code) from None
        return out

    def probe_inputs(self, count: int, text: str) -> list[Input]:
        """`count` copies of `text`'s ids, or of a grey image for an image model: warm-up and probe runs."""
        if self.text_tokenizer is None:
            return [_probe(self.manifest, None)] * count
        return [TokenSequence(e.ids) for e in self.text_tokenizer.encode([text] * count, truncate=True)]

    def run_batch(
        self, kind: BatchKind, sequences: Sequence[Input], adapters: Sequence[int] | None = None,
    ) -> list[Outputs]:
        """Outputs per sequence of `kind`'s graph, fed its choice of maps; `adapters`: each row's adapter index
        (None: the base)."""
        return self.graphs[kind.graph].run(sequences, adapters, kind.feeds())

    @property
    def tasks(self) -> frozenset[str]:
        """What this model can be asked: embed always; classify a sequence classifier (texts or pairs); rerank
        a cross-encoder (one label, pairs through PAIRS) or a multi-vector model (MaxSim); sparse a masked-LM
        bundle's SPLADE vectors or a multi-vector model's lexical weights (bge-m3's); multi_vector the token
        vectors of a late-interaction model; tokens a token classifier's labels; attention with an attention
        graph; embed_all with the token vectors; zero_shot a two-tower model (its images against label texts)."""
        graphs, m = self.graphs, self.manifest
        classify = m.task == "classify" and bool(m.labels)
        multi = self.multi_outputs
        can = {"embed": True, "classify": classify,
               "rerank": (classify and len(m.labels) == 1 and PAIRS.graph in graphs) or "multi_vectors" in multi,
               "sparse": SPARSE.graph in graphs or "token_weights" in multi, "multi_vector": "multi_vectors" in multi,
               "tokens": TOKEN_LOGITS.graph in graphs, "attention": "attention" in graphs,
               "embed_all": TOKENS.graph in graphs, "zero_shot": m.pair is not None}
        return frozenset(task for task, able in can.items() if able)

    @property
    def multi_outputs(self) -> frozenset[str]:
        """The per-token outputs of a multi-vector model's one run (multi_vectors, token_weights); empty for
        every other model."""
        graph = self.graphs.get(MULTI.graph)
        return frozenset(graph.outputs) - {"embeddings"} if graph is not None else frozenset()

    @property
    def fingerprint(self) -> str:
        """The model build served: sha256 (hex) over the served fast graph's sha256 (its content_sha256: with its
        data files, if any), the tokenizer's and the pooling, as the manifest records them (not the bundle's
        name, version or folder). The answer cache keys by it; responses carry it (x-model-fingerprint), /info
        and /v1/models list it, the corpus job writes it into its Parquet metadata."""
        graph = self.manifest.graph("fast", self.variants.get("fast", ""))
        facts = {"graph_sha256": graph.content_sha256 if graph else "",
                 "tokenizer_sha256": self.manifest.input_file[1], "pooling": self.manifest.pooling}  # images: steps
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def verify(bundle_dir: Path) -> Manifest:
    from bundle.verify import BundleError, verify_bundle  # the bundle's own checker; imports no torch

    try:
        return verify_bundle(bundle_dir)
    except BundleError as error:
        raise StartupError(f"invalid bundle {bundle_dir}: {error}") from None


def load_bundle(
    bundle_dir: Path, options: LoadOptions, kinds: Sequence[str] = KINDS, opened: Opened | None = None,
) -> LoadedBundle:
    """The bundle at `bundle_dir` with the graphs of `kinds` open (those it has: the attention graph is
    optional). With provider auto, CUDA is used only when the sessions really run on it."""
    import onnxruntime as ort

    bundle_dir, opened = Path(bundle_dir), {} if opened is None else opened
    manifest = verify(bundle_dir)
    provider = choose_provider(options.provider, ort.get_available_providers())
    loaded = _open(bundle_dir, manifest, provider, options, kinds, opened)
    if provider == "cuda" and loaded.provider != "cuda":
        reason = cuda_unavailable_reason()
        if options.provider == "cuda":
            raise StartupError(f"provider 'cuda' was asked for but the onnxruntime session did not run on CUDA: "
                               f"{reason}")
        log.warning("provider auto: onnxruntime offers CUDA but a session did not run on it (%s); serving on CPU",
                    reason)
        loaded = _open(bundle_dir, manifest, "cpu", options, kinds, opened)
    if manifest.pair is not None:  # verified with the bundle (bundle.verify)
        loaded.image_tower = load_bundle(bundle_dir / manifest.pair.image_tower, options, kinds, opened)
    log.info("loaded %s %s on %s, variants %s: %s", manifest.name, manifest.version, loaded.provider,
             loaded.variants, loaded.variant_reason)
    return loaded


def _open(bundle_dir: Path, manifest: Manifest, provider: str, options: LoadOptions, kinds: Sequence[str],
          opened: Opened) -> LoadedBundle:
    choice = choose_variant(options.variant, provider, manifest, options.allow_approximate)
    variants = {"fast": choice.variant}
    attention = choose_attention_variant(choice.variant, provider, manifest) if "attention" in kinds else None
    if attention is not None:
        variants["attention"] = attention
    text = manifest.modality == "text"
    tokenizer = _once(opened, ("tokenizer", *manifest.input_file, str(manifest.max_length)),
                      lambda: load_tokenizer(bundle_dir, manifest)) if text else None
    images = None if text else load_processing(bundle_dir)
    graphs = {kind: _graph(bundle_dir, manifest, kind, v, provider, options, opened) for kind, v in variants.items()}
    probe = _probe(manifest, tokenizer)
    for kind, graph in graphs.items():
        _smoke_run(graph, probe, manifest.graph(kind, variants[kind]))
    ran_on = "cuda" if all(ORT_PROVIDERS["cuda"] == g.providers[0] for g in graphs.values()) else "cpu"
    fast = manifest.graph("fast", variants["fast"])
    given = {o.name for o in fast.outputs} if fast is not None else set()
    for view, output in VIEWS.items():  # /embed_all, pairs, sparse vectors, token labels: the same session
        if output in given:
            graphs[view.graph] = graphs["fast"].with_outputs([output])
    if given & {"multi_vectors", "token_weights"}:  # a multi-vector model: every output it has, from one run
        graphs[MULTI.graph] = graphs["fast"].with_outputs([name for name in MULTI_OUTPUTS if name in given])
    loaded = LoadedBundle(manifest, tokenizer, graphs, ran_on, variants, choice.reason, images,
                          weights=opened.get(("weights",)))
    loaded.release_pages()  # packed and run once: what a graph reads again comes back from the page cache
    return loaded


def trim_heap() -> None:
    """glibc's malloc_trim(0): the free pages of every malloc arena given back to the system. The warm-up's runs free
    what they allocated outside onnxruntime's arenas (its threads' own malloc arenas), and glibc keeps it resident:
    on a Qwen3-0.6B-shaped bundle, 71 MB at ready (docs/performance.md). Nothing where the C library is not glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc: musl, macOS
        return None


def _probe(manifest: Manifest, tokenizer: TextTokenizer | None) -> Input:
    """The input of the first runs: a short text's ids, or a grey image of the bundle's size."""
    if tokenizer is not None:
        return TokenSequence(tokenizer.encode(["warm up"], truncate=True)[0].ids)
    spec = manifest.image
    assert spec is not None
    return ImageSequence(np.zeros((spec.channels, spec.height, spec.width), dtype=np.float32), spec.tokens)


def _smoke_run(graph: Graph, probe: Input, entry: GraphEntry | None) -> None:
    """One real run before serving: a graph that loads but cannot run stops the load, naming its file."""
    try:
        graph.run([probe])
    except Exception as error:  # onnxruntime raises its own types
        name = entry.file if entry is not None else "graph"
        raise StartupError(f"{name}: a first run failed ({type(error).__name__}: {str(error)[:200]})") from None


def _once(opened: Opened, key: tuple[str, ...], make: Callable[[], T]) -> T:
    """`make()`, or what an earlier bundle of the same load made for the same key (the same file content)."""
    if key not in opened:
        opened[key] = make()
    return opened[key]  # type: ignore[no-any-return]


def _graph(bundle_dir: Path, manifest: Manifest, kind: str, variant: str, provider: str, options: LoadOptions,
           opened: Opened) -> Graph:
    entry = manifest.graph(kind, variant)
    assert entry is not None  # chosen from the manifest's own list
    head = ["logits"] if manifest.task == "classify" else []  # the other heads' outputs have kinds of their own
    outputs = ["attentions"] if kind == "attention" else ["embeddings", *head]
    pad_id = manifest.pad_id
    weights = _once(opened, ("weights",), Weights)
    session = _once(opened, ("session", entry.content_sha256, provider),  # weights in data files included
                    lambda: _session(bundle_dir, entry, provider, options, weights))
    return Graph(session, outputs, pad_id)


def _session(bundle_dir: Path, entry: GraphEntry, provider: str, options: LoadOptions, weights: Weights) -> Any:
    """The graph's session, its external tensors from `weights` (held once for every graph that reads them)."""
    try:
        return open_session(bundle_dir / entry.file, provider, options.session_threads(), options.intra_op_spinning,
                            kind=entry.kind, initializers=weights.initializers(bundle_dir, entry))
    except Exception as error:  # onnxruntime raises its own types; name the file, keep the reason
        raise StartupError(f"{entry.file}: onnxruntime cannot load it ({type(error).__name__})") from error
