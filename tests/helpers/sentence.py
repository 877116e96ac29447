"""Random-weight sentence-transformers directories, written by sentence-transformers itself: a
tests/helpers/families.py (or tests/helpers/decoders.py) model under a Pooling, optional Dense modules (one, or a
chain of them as EmbeddingGemma has) and an optional Normalize, with prompts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from tests.helpers.decoders import DECODERS, save_decoder
from tests.helpers.families import save_hf

PROMPTS = {"query": "query: ", "document": "passage: "}
DENSE_ACTIVATIONS = {"tanh": torch.nn.Tanh, "identity": torch.nn.Identity, "relu": torch.nn.ReLU}


def save_sentence_transformer(
    directory: Path, arch: str, pooling: str, dense: str | None = None, normalize: bool = True,
    max_seq_length: int = 20, default_prompt_name: str | None = None, seed: int = 0, denses: int = 1,
    prompts: dict[str, str] = PROMPTS, shape: str = "small", tokenizer_config: dict[str, Any] | None = None,
    **config: Any,
) -> Path:
    """An ST directory at `directory` (its transformer saved first under directory/"hf"); returns `directory`.
    `denses` Dense modules of activation `dense` (none when it is None), widths halving then doubling back;
    `tokenizer_config`: the tokenizer_config.json the transformer ships (its family's test one otherwise);
    `config`: more of the transformer's config (e.g. max_position_embeddings)."""
    source = Path(directory) / "hf"
    if arch in DECODERS:
        save_decoder(source, arch, "Model", shape, seed=seed, **config)
    else:
        save_hf(source, arch, "Model", shape, seed=seed, **config)
    if tokenizer_config is not None:
        (source / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return wrap_sentence_transformer(directory, source, pooling, dense, normalize, max_seq_length,
                                     default_prompt_name, seed, denses, prompts)


def wrap_sentence_transformer(
    directory: Path, source: Path, pooling: str, dense: str | None = None, normalize: bool = True,
    max_seq_length: int = 20, default_prompt_name: str | None = None, seed: int = 0, denses: int = 1,
    prompts: dict[str, str] = PROMPTS,
) -> Path:
    """The Hugging Face directory `source` as the Transformer of an ST directory at `directory` (the modules as
    save_sentence_transformer says), saved by sentence-transformers; returns `directory`."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(source), max_seq_length=max_seq_length)
        width = transformer.get_embedding_dimension()
        modules = [transformer, Pooling(width, pooling_mode=pooling)]
        if dense is not None:
            widths = [width, *([width // 2, width] * denses)][:denses + 1]
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                modules += [Dense(w_in, w_out, bias=dense != "identity", activation_function=DENSE_ACTIVATIONS[dense]())
                            for w_in, w_out in zip(widths, widths[1:], strict=False)]
        if normalize:
            modules.append(Normalize())
        model = SentenceTransformer(modules=modules, prompts=prompts, default_prompt_name=default_prompt_name)
        model.save(str(directory))
    return Path(directory)


def load_reference(directory: Path) -> object:
    """sentence-transformers' own model from the directory, on CPU, eager attention (as the references elsewhere)."""
    from sentence_transformers import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SentenceTransformer(str(directory), device="cpu", model_kwargs={"attn_implementation": "eager"})
