"""export_bundle: checkpoint or BERT directory -> parity-gated ONNX bundle, written atomically.

Layout of a bundle directory (see docs/export.md):
    manifest.json          bundle.manifest.Manifest
    tokenizer.json         the source's tokenizer, byte for byte (a text model's)
    preprocessor_config.json  an image model's image processor config, byte for byte (export.images)
    {kind}-{variant}.onnx  one file per graph, e.g. fast-fp32.onnx, fast-int8.onnx, attention-fp32.onnx
    {kind}-{variant}.onnx.data  a large graph's weights (export.onnxfiles), listed in its entry's data_files
    weights-fp32.data      the fp32 and fp32-opt graphs' weights, each tensor once (export.shared_weights)
    image/                 a CLIP or SigLIP pair's image tower, itself a bundle, in its text tower's (export.pairs)

With LoRA adapters (`adapters`: name -> PEFT directory, read and stacked by model.load.load_model), the graphs hold
the base once and every adapter stacked (model/lora.py), take one more input (`adapter`, each row's index), are
gated on each adapter and on a batch mixing them (export.references.adapter_sets), and the manifest lists them
(`adapters`). The source is loaded once, through that door, whatever its layout (model/layouts.py).

Everything is built in a temporary sibling directory, gated, verified with bundle.verify, and only
then renamed into place: a failed export leaves no bundle (and an existing bundle untouched).
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bundle.files import sha256_file, staged_directory
from bundle.inputs import PairSpec
from bundle.manifest import MANIFEST_NAME, GraphEntry, Manifest, Source, TensorSpec
from bundle.variants import DEFAULT_VARIANTS
from bundle.verify import verify_bundle
from export import int8 as int8_static
from export import onnxfiles, shared_weights
from export import variants as variants_mod
from export.adapters import manifest_entry
from export.calibration import Int8Inputs, TextSets, int8_inputs
from export.graphs import KINDS, export_graph, fast_from_attention, input_shapes, output_shapes, task
from export.images import ImageInputs, image_inputs, parity_images
from export.measure import ImageFeeds, TextFeeds, measure_entries
from export.pairs import IMAGE_TOWER, check_pair, pair_spec, pair_type
from export.parity import ParityError, check_graph, check_sets
from export.parity_texts import pair_batches, parity_batches
from export.references import References, adapter_sets
from export.refusals import check_adapters, check_image, check_target, int8_texts, normalise_variants
from export.rounding import Rounding, float64_references
from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.load import load_model
from model.tokenizer import token_ids

log = logging.getLogger(__name__)
# a graph kind's sets of parity texts by name ("": the one set of a model without adapters), each with its Rounding
Gated = dict[str, tuple[References, Rounding]]
# The variants whose graphs read the same weights (fp32-opt's fused ones aside: export.folding), written once
# (export.shared_weights)
SHARED_VARIANTS = ("fp32", "fp32-opt")


def export_bundle(
    source: Path, out_dir: Path, variants: Sequence[str] = DEFAULT_VARIANTS,
    name: str | None = None, version: str = "1", calibration_data: Path | None = None, reranker: str | None = None,
    adapters: Mapping[str, Path] | None = None,
) -> Manifest:
    """Export `source` (anything model.load.load_model loads) to a bundle at `out_dir`: by default its exact
    variants (bundle.variants.DEFAULT_VARIANTS). The int8 variants calibrate on `calibration_data`
    (export.calibration; without it only a model trained on the Rotten Tomatoes snippets can have them).
    `reranker` names a recipe of model.lm_scorer: `source` is a causal LM exported as a one-label cross-encoder.
    `adapters`: PEFT LoRA directories over `source` by name, served as indices 1..N in this order.

    Raises ParityError when a graph misses its gate; no bundle is written then.
    """
    source, out_dir = Path(source), Path(out_dir)
    chosen = normalise_variants(variants)
    check_target(out_dir)
    if pair_type(source) is not None:
        check_pair(chosen, list(adapters or {}), reranker)
        return _export_pair(source, out_dir, chosen, name or source.resolve().name, version)
    check_adapters(list(adapters or {}), chosen, reranker)
    check_image(source, chosen)
    texts = int8_texts(source, chosen, calibration_data)
    model = load_model(source, adapters=adapters, reranker=reranker)
    check_adapters(list(model.encoder.config.adapters), chosen, reranker)  # a checkpoint's own (jina-v3's tasks)
    with staged_directory(out_dir) as tmp:
        manifest = _build(model, tmp, chosen, name or source.resolve().name, version, texts)
        (tmp / MANIFEST_NAME).write_text(manifest.to_json())
        verify_bundle(tmp)
    log.info("bundle written to %s", out_dir)
    return manifest


def _export_pair(source: Path, out_dir: Path, chosen: list[str], name: str, version: str) -> Manifest:
    """A CLIP or SigLIP pair: the text tower's bundle, the image tower's bundle inside it (export.pairs)."""
    with staged_directory(out_dir) as tmp:
        (tmp / IMAGE_TOWER).mkdir()
        image = _build(load_model(source, tower="vision"), tmp / IMAGE_TOWER, chosen, name, version, None)
        (tmp / IMAGE_TOWER / MANIFEST_NAME).write_text(image.to_json())
        text = load_model(source, tower="text")
        manifest = _build(text, tmp, chosen, name, version, None, pair_spec(text.encoder.config))
        (tmp / MANIFEST_NAME).write_text(manifest.to_json())
        verify_bundle(tmp)
    log.info("two-tower bundle written to %s", out_dir)
    return manifest


def _build(model: LoadedModel, tmp: Path, chosen: list[str], name: str, version: str,
           texts: TextSets | None, pair: PairSpec | None = None) -> Manifest:
    config, max_length = model.encoder.config, bundle_max_length(model)
    image = image_inputs(model.path, config, tmp) if config.vision else None  # its preprocessor file, copied
    tokenizer = None if image is not None else _write_tokenizer(model, tmp)
    int8 = int8_inputs(model, max_length, texts) if texts is not None else None
    graphs = _build_graphs(model, tmp, chosen, max_length, int8, image)
    graphs = measure_entries(graphs, tmp, _measuring_feeds(model, graphs, max_length, image))
    return Manifest(
        name=name, version=version, created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source=Source(path=str(model.path.resolve()), kind=model.kind, sha256=source_sha256(model.source_files)),
        model_config=config.to_dict(), labels=config.labels, pooling=config.pooling,  # type: ignore[arg-type,call-arg]
        architecture=config.architecture, task=task(config), embedding_size=config.embedding_size,
        prompts=model.prompts, default_prompt_name=model.default_prompt_name, pair_format=model.pair_format,
        normalize=config.normalize, max_length=image.spec.tokens if image else max_length, pad_id=config.pad_token_id,
        hidden_size=config.d_model, num_layers=config.num_layers, num_heads=config.num_heads,
        modality="image" if image else "text", tokenizer=tokenizer and tokenizer.name,
        tokenizer_sha256=tokenizer and sha256_file(tokenizer), image=image and image.spec, graphs=graphs,
        adapters=[manifest_entry(a) for a in model.adapters], multi_vector=model.multi_vector,
        pad_to_max_length=config.pad_to_max_length, pair=pair,
    )


def _write_tokenizer(model: LoadedModel, tmp: Path) -> Path:
    """The bundle's tokenizer.json: the source's, byte for byte, or an LLM reranker's, its prompt's prefix and suffix
    in the post-processor (model.lm_scorer), or a SigLIP text tower's, converted from its SentencePiece model."""
    tokenizer = tmp / "tokenizer.json"
    if model.pair_format is None and (model.path / "tokenizer.json").is_file():
        shutil.copyfile(model.path / "tokenizer.json", tokenizer)
    else:
        model.tokenizer.save(str(tokenizer))
    return tokenizer


def _measuring_feeds(model: LoadedModel, graphs: list[GraphEntry], max_length: int,
                     image: ImageInputs | None) -> TextFeeds | ImageFeeds:
    """What export.measure runs the fast graphs on: the parity texts' ids or the parity images."""
    if image is not None:
        return ImageFeeds(parity_images(image.processing, image.size), image.spec.tokens)
    names = next([i.name for i in e.inputs] for e in graphs if e.kind == "fast")
    ids = [token_ids(model.tokenizer, batch, max_length) for batch in parity_batches()]
    return TextFeeds(ids, model.encoder.config.pad_token_id, names)


def _parity_inputs(model: LoadedModel, image: ImageInputs | None) -> list[list[Any]]:
    """The parity texts (and a cross-encoder's pairs: its parity covers text pairs too), or an image model's
    parity images."""
    if image is not None:
        return parity_images(image.processing, image.size)  # type: ignore[return-value]
    return [*parity_batches(), *(pair_batches() if task(model.encoder.config) == "classify" else [])]


def _build_graphs(model: LoadedModel, tmp: Path, chosen: list[str], max_length: int,
                  int8: Int8Inputs | None, image: ImageInputs | None = None) -> list[GraphEntry]:
    """Every graph of every kind, each gated. The float64 references of every kind are computed first, before any
    graph is exported (their float64 copy of the model is let go by then), and let go on return, before the timings."""
    parity = _parity_inputs(model, image)
    sets = {(kind, name): texts for kind in KINDS
            for name, texts in _parity_sets(model, parity, max_length, kind).items()}
    started = time.perf_counter()
    twins = {("fast", name): ("attention", name) for kind, name in sets if kind == "fast"}  # export.rounding
    exact = float64_references(sets, twins=twins)
    log.info("float64 references of %d sets of texts in %.0f s", len(sets), time.perf_counter() - started)
    size = image.size if image else None
    export_graph(model.encoder, "attention", tmp / "attention-fp32.onnx", image_size=size)  # the fast one, less maps
    fast_from_attention(tmp / "attention-fp32.onnx", tmp / "fast-fp32.onnx")
    graphs = []
    for kind in KINDS:
        gated = {name: (texts, exact[k, name]) for (k, name), texts in sets.items() if k == kind}
        graphs += _build_kind(model, tmp, kind, chosen, gated, int8 if kind == "fast" else None, size)
    return _share_weights(graphs, tmp)


def _share_weights(entries: list[GraphEntry], tmp: Path) -> list[GraphEntry]:
    """The fp32 and fp32-opt graphs of every kind (the same weights) rewritten to read one data file
    (export.shared_weights), their entries' hashes and data files made anew."""
    group = [e for e in entries if e.variant in SHARED_VARIANTS]
    if len(group) < 2:
        return entries
    exact = [tmp / e.file for e in group if e.variant == "fp32"]  # the shared file holds exactly their weights
    shared_weights.share(exact, [tmp / e.file for e in group if e.variant != "fp32"])
    return [_rehashed(e, tmp / e.file) if e in group else e for e in entries]


def _rehashed(entry: GraphEntry, path: Path) -> GraphEntry:
    onnxfiles.make_readable(path)
    return entry.model_copy(update={"sha256": sha256_file(path), "data_files": onnxfiles.data_files(path)})


def _parity_sets(model: LoadedModel, parity: list[list[Any]], max_length: int, kind: str) -> dict[str, References]:
    """The texts a `kind` graph is gated on: the parity texts (and a cross-encoder's pairs) as one unnamed set, or
    with adapters the base, each adapter, and a batch mixing them, each a set of its own (export.parity)."""
    if model.encoder.config.adapters:
        return adapter_sets(model, parity, max_length, kind)
    return {"": References(model, parity, max_length, kind)}


def _check(path: Path, variant: str, gated: Gated) -> dict[str, float]:
    """check_graph on the one unnamed set, check_sets on named ones (each reported under its name)."""
    providers = variants_mod.PROVIDERS[variant]
    if list(gated) == [""]:
        return check_graph(path, variant, providers, *gated[""])
    return check_sets(path, variant, providers, {name: texts for name, (texts, _) in gated.items()},
                      {name: rounding for name, (_, rounding) in gated.items()})


def _build_kind(
    model: LoadedModel, tmp: Path, kind: str, chosen: list[str], gated: Gated, int8: Int8Inputs | None,
    image_size: tuple[int, int] | None = None,
) -> list[GraphEntry]:
    """Every chosen variant of `kind`, gated on `gated`: its sets of texts and their float64 references."""
    fp32 = tmp / f"{kind}-fp32.onnx"  # exported (or, fast, derived) by _build_graphs
    entries = []
    for variant in (v for v in chosen if v in variants_mod.KIND_VARIANTS[kind]):
        path = tmp / f"{kind}-{variant}.onnx"
        providers = variants_mod.PROVIDERS[variant]
        if variant.startswith("int8"):
            assert int8 is not None  # int8 variants exist for the fast kind, which gets the int8 inputs
            parity = _build_int8(variant, fp32, path, model.encoder.config, int8)
        else:
            if variant != "fp32" and not _built(variant, fp32, path, model.encoder.config):
                continue
            parity = _check(path, variant, gated)
        log.info("%s parity %s", path.name, parity)
        entries.append(_entry(path, kind, variant, providers, parity, model.encoder.config, image_size))
    return entries


def _built(variant: str, fp32: Path, path: Path, config: EncoderConfig) -> bool:
    """export.variants.build; False (logged, not an error) where the optimiser would add nothing to fp32."""
    try:
        variants_mod.build(variant, fp32, path, config)
    except variants_mod.NothingFused as reason:
        log.warning("%s", reason)
        return False
    return True


def _build_int8(variant: str, fp32: Path, path: Path, config: EncoderConfig, int8: Int8Inputs) -> dict[str, float]:
    """int8 (static, export.int8) or int8-dynamic, each gated on the parity, short and held-out texts."""
    def passes(graph: Path) -> dict[str, float]:
        return check_sets(graph, variant, variants_mod.PROVIDERS[variant], int8.gate)

    if variant == "int8":
        return int8_static.build(fp32, path, config, int8.calibration_feeds, int8.calibration_reference, passes)
    return _build_int8_dynamic(fp32, path, config, passes)


def _build_int8_dynamic(fp32: Path, path: Path, config: EncoderConfig,
                        passes: Callable[[Path], dict[str, float]]) -> dict[str, float]:
    """The widest dynamic int8 scope that passes the gate (variants.INT8_SCOPES); its MatMul count is recorded."""
    error: ParityError | None = None
    for scope in variants_mod.INT8_SCOPES:
        count = variants_mod.quantize(fp32, path, config, scope)
        try:
            return {**passes(path), "quantized_matmuls": float(count)}
        except ParityError as err:
            log.warning("int8-dynamic with %s projections quantised missed the gate (%s)", "/".join(scope), err)
            error = err
    assert error is not None
    raise error


def _entry(
    path: Path, kind: str, variant: str, providers: list[str], parity: dict[str, float], config: EncoderConfig,
    image_size: tuple[int, int] | None = None,
) -> GraphEntry:
    dtype = "float32" if config.vision else "int64"  # pixel values, or token ids, masks and indices
    inputs = [TensorSpec(name=n, dtype=dtype, shape=s) for n, s in input_shapes(config, image_size=image_size).items()]
    outputs = [TensorSpec(name=n, dtype="float32", shape=s) for n, s in output_shapes(config, kind, image_size).items()]
    onnxfiles.make_readable(path)
    return GraphEntry(
        file=path.name, sha256=sha256_file(path), kind=kind, variant=variant,  # type: ignore[arg-type]
        providers=providers, inputs=inputs, outputs=outputs, parity=parity, data_files=onnxfiles.data_files(path),
    )


def bundle_max_length(model: LoadedModel) -> int:
    """The longest input the model is meant to see: its config's serving length (sentence-transformers'
    max_seq_length travels in the config, also through training), else the position limit."""
    return model.encoder.config.serving_length


def source_sha256(files: Iterable[Path]) -> str:
    """sha256 over (name, sha256) of the files that identify the source, in its layout's order
    (model/layouts.py: config.json, the weight files, a layout's own files such as bge-m3's heads)."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.name}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()
