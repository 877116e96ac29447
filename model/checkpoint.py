"""Checkpoint directories: config.json, model.safetensors, tokenizer.json, labels.json, metrics.json.

Never pickle: weights go through safetensors, everything else is JSON. Writes are atomic
(bundle.files.staged_directory): the files are written into an empty sibling directory that replaces
the old checkpoint only once every file is complete, so a crash or an error while writing leaves
the previous checkpoint as it was.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from bundle.files import staged_directory
from bundle.multi_vector import MultiVectorSpec
from model.config import EncoderConfig
from model.encoder import Encoder
from model.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from model.peft import Adapter

FORMAT = "attnserve-encoder"
FORMAT_VERSION = 1


@dataclass
class LoadedModel:
    encoder: Encoder
    text_tokenizer: Tokenizer | None  # None: a vision model, which reads pixels (see `tokenizer`)
    kind: str  # "attnserve", "hf-<family>" (e.g. "hf-bert"), "sentence-transformers", "bge-m3", "pylate", ...
    path: Path
    prompts: dict[str, str] = field(default_factory=dict)  # sentence-transformers' prompts, by name
    default_prompt_name: str | None = None
    pair_format: str | None = None  # an LLM reranker's pair as one text (model.lm_scorer)
    # a multi-vector model's (ColBERT, bge-m3): how its token outputs become the reference's, written to the manifest
    multi_vector: MultiVectorSpec | None = None
    # set by model.load.load_model: the files that identify the source (its layout's, model/layouts.py) and the
    # PEFT adapters stacked in the encoder (model/peft.py), in index order
    source_files: tuple[Path, ...] = ()
    adapters: tuple[Adapter, ...] = ()

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer; a ValueError for a vision model, which has none (its input is pixel values,
        prepared as its preprocessor_config.json says)."""
        if self.text_tokenizer is None and self.encoder.config.vision:
            raise ValueError(f"{self.path} is a {self.encoder.config.modality} model: it reads pixel values and has "
                             "no tokenizer")
        if self.text_tokenizer is None:
            raise ValueError(f"{self.path} has no tokenizer.json (a two-tower checkpoint's SentencePiece model is "
                             "converted by the export)")
        return self.text_tokenizer


def is_checkpoint(path: Path) -> bool:
    config = path / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("format") == FORMAT


def save_checkpoint(
    out_dir: Path, encoder: Encoder, tokenizer: Tokenizer, metrics: dict[str, Any] | None = None,
) -> None:
    with staged_directory(Path(out_dir)) as staging:
        _write(staging, encoder, tokenizer, metrics)


def _write(directory: Path, encoder: Encoder, tokenizer: Tokenizer, metrics: dict[str, Any] | None) -> None:
    config = encoder.config
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "encoder": config.to_dict()}
    (directory / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    # clone: a tied MLM decoder shares the embedding's storage, which safetensors refuses to write twice
    state = {k: v.detach().cpu().clone().contiguous() for k, v in encoder.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(directory / "model.safetensors", 0o644)  # safetensors 0.8 writes 0o600 (safetensors#782)
    tokenizer.save(str(directory / "tokenizer.json"))
    if config.head != "none":
        (directory / "labels.json").write_text(json.dumps(config.labels, indent=2) + "\n")
    if metrics is not None:
        (directory / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


def load_checkpoint(path: Path) -> LoadedModel:
    path = Path(path)
    missing = [n for n in ("config.json", "model.safetensors", "tokenizer.json") if not (path / n).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint {path} is missing {', '.join(missing)}")
    meta = json.loads((path / "config.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path / 'config.json'} is not an attnserve checkpoint config")
    encoder = Encoder(EncoderConfig.from_dict(meta["encoder"]))
    encoder.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
    return LoadedModel(encoder.eval(), load_tokenizer(path / "tokenizer.json"), "attnserve", path)
