"""One entry point for every model source: our checkpoints, ColBERT checkpoints (model/colbert.py: PyLate folders and
colbert-ai checkpoints, before the Hugging Face reader would take them for plain encoders) and Hugging Face
directories (model/hf.py)."""

from __future__ import annotations

from pathlib import Path

from model.checkpoint import LoadedModel, is_checkpoint, load_checkpoint
from model.colbert import colbert_layout, load_colbert
from model.hf import is_hf_dir, load_hf


def load_model(path: Path | str) -> LoadedModel:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    if is_checkpoint(path):
        return load_checkpoint(path)
    if colbert_layout(path):
        return load_colbert(path)
    if is_hf_dir(path):
        return load_hf(path)
    raise ValueError(
        f"{path} is neither an attnserve checkpoint nor a Hugging Face model directory "
        "(config.json with 'format' or 'model_type' is missing)"
    )
