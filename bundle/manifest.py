"""Bundle manifest: the contract between export (producer) and service (consumer).

Torch-free, like the whole `bundle` package: the service reads bundles through it. A bundle
directory holds `manifest.json`, `tokenizer.json` (a text model's) or `preprocessor_config.json` (an image model's,
bundle.preprocessing) and the graphs the manifest lists; every file name is a plain name inside the bundle directory.

Modality (schema 5): a "text" model reads token ids; an "image" model (ViT, DINOv2, CLIP's or SigLIP's image tower)
reads pixel_values (batch, channels, height, width) float32 instead, at the one size its `image` section says, and its
per-token outputs have that section's fixed `tokens` in place of the sequence axis (every token real).

Two towers (schema 6): a CLIP or SigLIP pair is one bundle of its text tower whose `pair` section names a directory
inside it (`image_tower`) holding the image tower's own bundle, and says how the pair scores an image against texts.
A text tower trained on texts padded to its max length and read with no mask (SigLIP's) says `pad_to_max_length`:
its served texts are padded with pad_id to max_length, every position attended.

Graph kinds:
    fast       inputs input_ids, attention_mask (int64, (batch, sequence)) and, where the entry lists it,
               token_type_ids; outputs embeddings (batch, embedding_size), pooled (and projected by a
               sentence-transformers Dense) before L2 normalisation, token_embeddings (batch, sequence,
               hidden), and by `task`: logits (batch, labels) for "classify", token_logits (batch,
               sequence, labels) for "tokens", sparse (batch, vocabulary) for "sparse" (SPLADE: the max over
               real tokens of log(1 + relu(masked-LM logits))); "embed" has neither. A multi-vector model adds,
               after those: multi_vectors (batch, sequence, multi_vector.size), every token's raw vector, and/or
               token_weights (batch, sequence), every token's relu(sparse_linear) weight (bge-m3's).
    attention  the same inputs and outputs plus attentions (batch, layers, heads, sequence, sequence): the maps of the
               layers and heads it is fed (bundle.feeds: `layers`, `heads`, overridable initializers holding every
               index, so not in the entry's `inputs`; every map when not fed). A graph exported before the choice
               has fixed axes there (num_layers, num_heads) and always computes every map.
Variants: fp32 (as exported), fp32-opt (onnxruntime transformer optimiser), int8 (static
quantisation with calibrated activation scales, CPU), int8-dynamic (dynamic quantisation, CPU; its
vectors depend on their batch partners), fp16 (CUDA).

Export writes schema SCHEMA_VERSION; READABLE_SCHEMAS are read, an older one with the values it implied for the
fields added since. What each version and each optional section added: docs/export.md, "Manifest schema versions".
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from bundle.inputs import ImageSpec, PairSpec, Strict, check_plain_name
from bundle.multi_vector import MultiVectorSpec

SCHEMA_VERSION = 6
READABLE_SCHEMAS = (1, 2, 3, 4, 5, 6)
MANIFEST_NAME = "manifest.json"
# A graph is batch-invariant when a text's outputs alone and in any batch differ by at most this.
BATCH_INVARIANCE_TOLERANCE = 1e-5

GraphKind = Literal["fast", "attention"]
Pooling = Literal["mean", "cls", "max", "lasttoken", "weightedmean", "mean_sqrt_len", "probe", "end_token", "max_id",
                  "last_position"]
Modality = Literal["text", "image"]
Task = Literal["embed", "classify", "tokens", "sparse"]
Variant = Literal["fp32", "fp32-opt", "int8", "int8-dynamic", "fp16"]


class TensorSpec(Strict):
    name: str
    dtype: str  # onnx element type name: "int64", "float32", "float16"
    shape: list[str | int]  # symbolic axes by name, fixed axes by size


class Measured(Strict):
    """What export measured of one graph on one provider."""

    batch_max_abs_diff: float  # embeddings and logits of texts run alone vs in mixed, padded batches
    ms_per_batch: dict[str, float] = Field(default_factory=dict)  # "32x128" (B x T) -> median ms per batch
    clock: Literal["process_cpu", "wall"] = "process_cpu"  # CPU time of this process, or wall time (CUDA)

    @property
    def batch_invariant(self) -> bool:
        return self.batch_max_abs_diff <= BATCH_INVARIANCE_TOLERANCE


class GraphEntry(Strict):
    file: str
    sha256: str
    kind: GraphKind
    variant: Variant
    providers: list[str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    parity: dict[str, float] = Field(default_factory=dict)
    measured: dict[str, Measured] = Field(default_factory=dict)  # provider ("cpu", "cuda") -> figures
    # The external data files the graph reads its tensors from (a graph over protobuf's 2 GiB limit): name ->
    # sha256. Left out of the JSON when empty, so a bundle without them reads as it always did.
    data_files: dict[str, str] = Field(default_factory=dict)

    @field_validator("file")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        return check_plain_name(value)

    @field_validator("data_files")
    @classmethod
    def _plain_data_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            check_plain_name(name)
        return value

    @model_serializer(mode="wrap")
    def _without_empty_data_files(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.data_files:
            data.pop("data_files", None)
        return data

    @property
    def content_sha256(self) -> str:
        """What identifies the graph's content, weights included: `sha256` for a graph in one file; with data
        files, sha256 over `sha256` and each data file's "{name}\0{sha256}\n" (two models of one
        architecture can write the same .onnx and differ only in their data files)."""
        if not self.data_files:
            return self.sha256
        digest = hashlib.sha256(self.sha256.encode())
        for name, sha256 in sorted(self.data_files.items()):
            digest.update(f"{name}\0{sha256}\n".encode())
        return digest.hexdigest()


class AdapterEntry(Strict):
    """One LoRA adapter of the bundle; its index in the graphs' `adapter` input is its place in the list + 1."""

    name: str
    rank: int  # its largest rank (the graphs pad every adapter to the largest of all)
    alpha: float  # PEFT's lora_alpha
    scaling: float  # lora_alpha / rank (rsLoRA: / sqrt(rank)), folded into the graphs' weights
    use_rslora: bool = False
    targets: list[str]  # our block modules it adapts: attention.q_proj, ..., ffn.up, ffn.down
    source: str | None = None  # the PEFT directory's base_model_name_or_path
    bytes: int  # float32 bytes of its low-rank matrices


class Source(Strict):
    path: str
    kind: str  # "attnserve" checkpoint, "hf-<family>" (e.g. "hf-bert"), "sentence-transformers" or "bge-m3" directory,
    # or a ColBERT checkpoint: "pylate" folder or "colbert-ai" checkpoint (model/colbert.py)
    sha256: str


class Manifest(Strict):
    schema_version: int = SCHEMA_VERSION
    name: str
    version: str
    created_at: str
    source: Source
    model_config_: dict[str, Any] = Field(alias="model_config")
    labels: list[str] = Field(default_factory=list)
    architecture: str = "bert"
    task: Task  # before schema 3: "classify" when there are labels, else "embed"
    pooling: Pooling
    normalize: bool
    embedding_size: int  # width of `embeddings`; before schema 3: hidden_size
    prompts: dict[str, str] = Field(default_factory=dict)  # name -> prefix, as sentence-transformers prepends it
    default_prompt_name: str | None = None
    # An LLM reranker's (query, document) pair written as one text, "...{query}...{document}...", tokenised as one
    # sequence (its template's prefix and suffix come from the tokenizer's post-processor); None: the pair template
    pair_format: str | None = None
    max_length: int
    pad_id: int = Field(ge=0)  # the id padding positions of input_ids get; before schema 4: the config's pad_token_id
    hidden_size: int
    num_layers: int
    num_heads: int
    modality: Modality = "text"  # before schema 5: "text"
    tokenizer: str | None = "tokenizer.json"  # a text model's; None for an image model
    tokenizer_sha256: str | None = None
    image: ImageSpec | None = None  # an image model's; left out of the JSON when None
    pad_to_max_length: bool = False  # SigLIP's text tower (schema 6); left out of the JSON when False
    pair: PairSpec | None = None  # a two-tower model's (schema 6); left out of the JSON when None
    graphs: list[GraphEntry]
    adapters: list[AdapterEntry] = Field(default_factory=list)  # left out of the JSON when empty
    multi_vector: MultiVectorSpec | None = None  # a multi-vector model's; left out of the JSON when None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _implied_by_older_schemas(cls, data: Any) -> Any:
        """Bundles written before schema 3 lack task and embedding_size, before schema 4 pad_id: the values they
        implied (the service padded with the model config's pad_token_id). A schema 4 bundle must state it."""
        if isinstance(data, dict):
            implied: dict[str, Any] = {"task": "classify" if data.get("labels") else "embed",
                                       "embedding_size": data.get("hidden_size")}
            if data.get("schema_version", SCHEMA_VERSION) < 4:
                implied["pad_id"] = int((data.get("model_config") or {}).get("pad_token_id", 0))
            data = {**implied, **data}
        return data

    @model_serializer(mode="wrap")
    def _without_empty_adapters(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.adapters:
            data.pop("adapters", None)
        for optional in ("multi_vector", "image", "pair"):
            if data.get(optional) is None:
                data.pop(optional, None)
        if not self.pad_to_max_length:
            data.pop("pad_to_max_length", None)
        return data

    @model_validator(mode="after")
    def _inputs_of_the_modality(self) -> Manifest:
        """A text model has a tokenizer and no image section; an image model an image section and no tokenizer."""
        text = self.modality == "text"
        if text and (self.tokenizer is None or self.tokenizer_sha256 is None or self.image is not None):
            raise ValueError("a text model's manifest names its tokenizer and its sha256, and has no image section")
        if not text and (self.tokenizer is not None or self.image is None):
            raise ValueError("an image model's manifest has an image section and no tokenizer (tokenizer: null)")
        if not text and (self.pair is not None or self.pad_to_max_length):
            raise ValueError("pair and pad_to_max_length are a text tower's: a pair's bundle is its text tower's")
        return self

    @model_validator(mode="after")
    def _multi_vector_as_configured(self) -> Manifest:
        """A multi_vector section exactly when the model config has multi-vector outputs, of the config's width."""
        size = int(self.model_config_.get("multi_vector_size") or 0)
        configured = bool(size or self.model_config_.get("token_weights"))
        if configured != (self.multi_vector is not None) or (self.multi_vector and self.multi_vector.size != size):
            raise ValueError(f"multi_vector {self.multi_vector} does not match the model config's multi-vector "
                             f"outputs (multi_vector_size {size}, token_weights "
                             f"{bool(self.model_config_.get('token_weights'))})")
        return self

    @model_validator(mode="after")
    def _adapters_as_configured(self) -> Manifest:
        """The adapters are the model config's, in its order (their index is their place), each name once."""
        names = [a.name for a in self.adapters]
        configured = list(self.model_config_.get("adapters") or [])
        if names != configured:
            raise ValueError(f"adapters {names} differ from the model config's adapters {configured}")
        return self

    @field_validator("pair_format")
    @classmethod
    def _pair_fields(cls, value: str | None) -> str | None:
        if value is not None and ("{query}" not in value or "{document}" not in value):
            raise ValueError(f"pair_format must hold {{query}} and {{document}}; got {value!r}")
        return value

    @model_validator(mode="after")
    def _known_default_prompt(self) -> Manifest:
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(f"default_prompt_name {self.default_prompt_name!r} is not one of the prompts "
                             f"{sorted(self.prompts)}")
        return self

    @field_validator("schema_version")
    @classmethod
    def _known_schema(cls, value: int) -> int:
        if value not in READABLE_SCHEMAS:
            raise ValueError(f"schema_version {value} is not supported (this attnserve reads "
                             f"{', '.join(map(str, READABLE_SCHEMAS))})")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _plain_tokenizer(cls, value: str | None) -> str | None:
        return value if value is None else check_plain_name(value)

    @property
    def attention_windows(self) -> list[int | None]:
        """Per layer, how many tokens on each side a token attends to in a local (sliding-window) layer, as
        ModernBERT's are, or None for a global layer (every token), from the model config's layer pattern."""
        config = self.model_config_
        window, every = int(config.get("window_size", 0)), int(config.get("global_attn_every", 1))
        if config.get("mask_kind") == "window":
            return [window] * self.num_layers
        if config.get("layer_types"):  # the decoders' full / sliding per layer
            return [window if kind == "sliding" else None for kind in config["layer_types"]]
        return [window if every > 1 and layer % every else None for layer in range(self.num_layers)]

    @property
    def input_file(self) -> tuple[str, str]:
        """(name, sha256) of the file inputs are prepared by: the tokenizer, or an image model's preprocessor."""
        if self.image is not None:
            return self.image.preprocessor, self.image.preprocessor_sha256
        assert self.tokenizer is not None and self.tokenizer_sha256 is not None  # _inputs_of_the_modality
        return self.tokenizer, self.tokenizer_sha256

    @property
    def causal(self) -> bool:
        """Whether a token attends only to itself and the tokens before it (a decoder's causal mask)."""
        return self.model_config_.get("mask_kind") == "causal"

    def adapter_index(self, name: str | None) -> int:
        """The `adapter` input's value for the adapter `name` (None: 0, the bare base); ValueError naming the
        bundle's adapters for an unknown one."""
        if name is None:
            return 0
        names = [a.name for a in self.adapters]
        if name not in names:
            raise ValueError(f"adapter {name!r} is not in bundle {self.name}; "
                             f"its adapters: {', '.join(names) or 'none'}")
        return names.index(name) + 1

    def graph(self, kind: str, variant: str) -> GraphEntry | None:
        return next((g for g in self.graphs if g.kind == kind and g.variant == variant), None)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2) + "\n"

    @classmethod
    def read(cls, bundle_dir: Path) -> Manifest:
        return cls.model_validate_json((bundle_dir / MANIFEST_NAME).read_text())
