"""Random-weight sentence-transformers directories, written by sentence-transformers itself: a
tests/helpers/families.py model under a Pooling, an optional Dense and an optional Normalize, with prompts."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from tests.helpers.families import save_hf

PROMPTS = {"query": "query: ", "document": "passage: "}
DENSE_ACTIVATIONS = {"tanh": torch.nn.Tanh, "identity": torch.nn.Identity, "relu": torch.nn.ReLU}


def save_sentence_transformer(
    directory: Path, arch: str, pooling: str, dense: str | None = None, normalize: bool = True,
    max_seq_length: int = 20, default_prompt_name: str | None = None, seed: int = 0,
) -> Path:
    """An ST directory at `directory` (its transformer saved first under directory/"hf"); returns `directory`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    source = Path(directory) / "hf"
    save_hf(source, arch, "Model", seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(source), max_seq_length=max_seq_length)
        width = transformer.get_embedding_dimension()
        modules = [transformer, Pooling(width, pooling_mode=pooling)]
        if dense is not None:
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                modules.append(Dense(width, width // 2, activation_function=DENSE_ACTIVATIONS[dense]()))
        if normalize:
            modules.append(Normalize())
        model = SentenceTransformer(modules=modules, prompts=PROMPTS, default_prompt_name=default_prompt_name)
        model.save(str(directory))
    return Path(directory)


def load_reference(directory: Path) -> object:
    """sentence-transformers' own model from the directory, on CPU, eager attention (as the references elsewhere)."""
    from sentence_transformers import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SentenceTransformer(str(directory), device="cpu", model_kwargs={"attn_implementation": "eager"})
