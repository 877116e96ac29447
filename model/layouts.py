"""Checkpoint layouts as data: one record per way a model directory is laid out, in one registry list.

Each Layout says how it is recognised from the directory's files, which of its files identify the source (the
export's source hash), and how its model loads. The registry is searched in order, the first layout that
recognises a directory wins, so a more particular layout stands before the one it extends (PyLate before
sentence-transformers, bge-m3 before a plain Hugging Face directory):

    attnserve              our checkpoint (model/checkpoint.py): config.json with our "format"
    pylate, colbert-ai     ColBERT checkpoints (model/colbert.py)
    bge-m3                 an XLM-R directory with FlagEmbedding's head files (model/bge_m3.py)
    jina-lora              jina-embeddings-v3 as released: its task LoRAs inside the weights (model/jina_lora.py)
    sentence-transformers  a Hugging Face directory with modules.json (model/sentence.py)
    hugging-face           config.json with a model_type of a family in model/families/ (model/hf.py)
    peft                   a LoRA adapter directory (model/peft.py): served over a base, never alone

Two ways of serving a model are not layouts, because the files do not say them: an LLM reranker is a plain causal
LM read by a recipe the caller names (model/lm_scorer.py), and PEFT adapters are named by the caller beside their
base. model/load.py's load_model takes both as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from model.bge_m3 import COLBERT_FILE, SPARSE_FILE, has_bge_m3_heads
from model.checkpoint import LoadedModel, is_checkpoint, load_checkpoint
from model.colbert import colbert_layout, load_colbert_ai, load_pylate
from model.hf import is_hf_dir, load_bge_m3, load_hf, load_sentence_transformers
from model.jina_lora import is_jina_lora_dir, load_jina_lora
from model.peft import CONFIG_NAME, WEIGHTS_NAME
from model.weights import weight_files

__all__ = ["LAYOUTS", "Layout", "layout_of", "load_base"]


@dataclass(frozen=True)
class Layout:
    name: str
    recognise: Callable[[Path], bool]  # whether a directory is laid out this way
    files: Callable[[Path], list[Path]]  # the files that identify the source, in hash order (those present)
    load: Callable[[Path], LoadedModel]


def model_files(path: Path) -> list[Path]:
    """config.json and the weight files (one file, or an index and its shards), where they are present."""
    return [file for file in (path / "config.json", *weight_files(path)) if file.is_file()]


def bge_m3_files(path: Path) -> list[Path]:
    """The model's files, then FlagEmbedding's two head files."""
    return model_files(path) + [file for file in (path / COLBERT_FILE, path / SPARSE_FILE) if file.is_file()]


def peft_files(path: Path) -> list[Path]:
    return [file for file in (path / CONFIG_NAME, path / WEIGHTS_NAME) if file.is_file()]


def load_peft(path: Path) -> LoadedModel:
    """Refused: an adapter is nothing without the base it was trained on."""
    raise ValueError(f"{path} is a PEFT adapter directory; load its base with the adapter beside it "
                     "(load_model(base, adapters={name: directory}), attnserve export BASE --adapter NAME=DIR)")


LAYOUTS: tuple[Layout, ...] = (
    Layout("attnserve", is_checkpoint, model_files, load_checkpoint),
    Layout("pylate", lambda path: colbert_layout(path) == "pylate", model_files, load_pylate),
    Layout("colbert-ai", lambda path: colbert_layout(path) == "colbert-ai", model_files, load_colbert_ai),
    Layout("bge-m3", lambda path: is_hf_dir(path) and has_bge_m3_heads(path), bge_m3_files, load_bge_m3),
    Layout("jina-lora", is_jina_lora_dir, model_files, load_jina_lora),
    Layout("sentence-transformers", lambda path: is_hf_dir(path) and (path / "modules.json").is_file(),
           model_files, load_sentence_transformers),
    Layout("hugging-face", is_hf_dir, model_files, load_hf),
    Layout("peft", lambda path: (path / CONFIG_NAME).is_file(), peft_files, load_peft),
)


def layout_of(path: Path) -> Layout:
    """The first layout of the registry that recognises the directory `path`; a clear error when none does."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    found = next((layout for layout in LAYOUTS if layout.recognise(path)), None)
    if found is None:
        raise ValueError(
            f"{path} is neither an attnserve checkpoint nor a Hugging Face model directory "
            "(config.json with 'format' or 'model_type' is missing)"
        )
    return found


def load_base(path: Path, tower: str | None = None) -> LoadedModel:
    """The model the directory holds, loaded as its layout loads it, with the files that identify it; `tower`: one
    tower of a two-tower Hugging Face checkpoint (model/towers.py), which no other layout holds."""
    path = Path(path)
    layout = layout_of(path)
    if tower is not None and layout.name != "hugging-face":
        raise ValueError(f"tower {tower!r}: {path} is a {layout.name} directory, not a two-tower checkpoint")
    loaded = layout.load(path) if tower is None else load_hf(path, tower)
    return replace(loaded, source_files=tuple(layout.files(path)))
