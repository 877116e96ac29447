"""Random-weight bge-m3 directories as FlagEmbedding reads them, and what BGEM3FlagModel returns for them.

    save_bge_m3(directory, "tiny" | "realistic")  XLMRobertaModel (transformers' seeded initialisation, vectors
        moved off their start) + tokenizer.json (tests/helpers/tokenizers.unigram, XLM-R's SentencePiece kind:
        its real 250k vocabulary is too big for a test) + colbert_linear.pt (Linear(D, D), a bias) and
        sparse_linear.pt (Linear(D, 1)) beside it, as FlagEmbedding's M3 model saves them; tokenizer_config.json
        names the tokenizer class PreTrainedTokenizerFast and XLM-R's special tokens, so AutoTokenizer reads
        tokenizer.json as it is (transformers 5's XLMRobertaTokenizer rebuilds the pipeline and drops a normalizer
        that is not SentencePiece's precompiled one: NFKC's "，" would become <unk>)
    encode_reference(directory, texts)  BGEM3FlagModel(..., use_fp16=False, devices="cpu").encode with all three
        outputs, and the reference model for its compute_lexical_matching_score and colbert_score
    from_outputs(...)  our raw outputs (PyTorch's or a graph's) through inference/tasks/multi_vector_scores.py, in the
    reference's
        form; differences(ours, reference) the max abs diff of each output

Shapes: tiny (hidden 32, 2 heads, 2 layers), realistic (hidden 256, 4 heads of width 64, 4 layers); TEXTS are the
tiny shape's inputs (one holds characters the vocabulary lacks, so <unk> appears and is dropped), LONG_TEXTS the
realistic one's (120 to 270 tokens: one is cut to the 256-token position limit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from bundle.multi_vector import MultiVectorSpec
from inference.tasks import multi_vector_scores
from tests.helpers import tokenizers
from tests.helpers.families import randomise_vectors, save_random

SHAPES = {"tiny": dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
                       max_position_embeddings=66),
          "realistic": dict(hidden_size=256, num_attention_heads=4, num_hidden_layers=4, intermediate_size=512,
                            max_position_embeddings=258)}
UNKNOWN = "Ωμέγα ≈ ∫ √ ∞ ♞ ⌘"  # characters the test vocabulary lacks: <unk> tokens
TEXTS = [*tokenizers.MULTILINGUAL[:6], UNKNOWN, "dog dog dog the the lazy dog", "a"]
LONG_TEXTS = [*(" ".join(tokenizers.MULTILINGUAL[i:i + 5]) for i in (0, 2, 5)), "The quick brown fox. " * 14,
              UNKNOWN, tokenizers.MULTILINGUAL[4]]
XLMR_TOKENS = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "cls_token": "<s>",
               "eos_token": "</s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
               "mask_token": "<mask>"}
QUERY, DOCUMENT = "Who jumps over the lazy dog?", tokenizers.MULTILINGUAL[8]


def save_bge_m3(directory: Path, shape: str, seed: int = 0) -> None:
    """A seeded random bge-m3 of `shape` at `directory` (module docstring)."""
    tokenizer = tokenizers.unigram()
    config = transformers.XLMRobertaConfig(vocab_size=tokenizer.get_vocab_size(), pad_token_id=1, bos_token_id=0,
                                           eos_token_id=2, **SHAPES[shape])
    save_random(directory, transformers.XLMRobertaModel, config, tokenizer, seed)
    width = config.hidden_size
    with torch.random.fork_rng():
        torch.manual_seed(seed + 1)
        colbert, sparse = torch.nn.Linear(width, width), torch.nn.Linear(width, 1)
        randomise_vectors(colbert)
    torch.save(colbert.state_dict(), Path(directory) / "colbert_linear.pt")
    torch.save(sparse.state_dict(), Path(directory) / "sparse_linear.pt")
    (Path(directory) / "tokenizer_config.json").write_text(json.dumps(XLMR_TOKENS))


def reference_model(directory: Path) -> Any:
    """FlagEmbedding's BGEM3FlagModel over `directory`, in float32 on the CPU."""
    from FlagEmbedding import BGEM3FlagModel

    return BGEM3FlagModel(str(directory), use_fp16=False, devices="cpu")


def encode_reference(model: Any, texts: list[str], max_length: int) -> dict[str, Any]:
    """dense_vecs (N, D), lexical_weights (per text: str(id) -> weight) and colbert_vecs (per text: (n, D)), each
    text cut to max_length tokens (the model's position limit: FlagEmbedding's default, 512, passes it here)."""
    return model.encode(texts, return_dense=True, return_sparse=True, return_colbert_vecs=True,
                        max_length=max_length)


@dataclass
class M3Outputs:
    """Per text what BGEM3FlagModel.encode returns, from our outputs: dense (N, D), lexical (id -> weight), colbert
    (n, M) each."""

    dense: np.ndarray
    lexical: list[dict[int, float]]
    colbert: list[np.ndarray]


def from_outputs(dense: np.ndarray, multi_vectors: np.ndarray, token_weights: np.ndarray, feeds: dict[str, np.ndarray],
                 spec: MultiVectorSpec, normalize: bool) -> M3Outputs:
    """Our raw outputs of one padded batch ((N, D), (N, T, M), (N, T)) made into the reference's, through the
    torch-free inference.tasks.multi_vector_scores and the manifest's normalize."""
    ids, mask = feeds["input_ids"], feeds["attention_mask"]  # (N, T) each
    vectors = [multi_vector_scores.token_vectors(multi_vectors[i], ids[i], mask[i], spec) for i in range(len(ids))]
    weights = [multi_vector_scores.lexical_weights(token_weights[i], ids[i], mask[i], spec.sparse_drop_ids)
               for i in range(len(ids))]
    return M3Outputs(multi_vector_scores.normalize(dense) if normalize else dense, weights, vectors)


def differences(ours: M3Outputs, reference: dict[str, Any]) -> dict[str, float]:
    """Max abs diff of the dense vectors, the lexical weights and the colbert vectors from the reference's; a text
    whose lexical ids or colbert vector count differ raises AssertionError naming it."""
    lexical = colbert = 0.0
    for row, (weights, expected) in enumerate(zip(ours.lexical, reference["lexical_weights"], strict=True)):
        assert list(weights) == [int(i) for i in expected], f"text {row}: lexical ids differ"
        lexical = max([lexical, *(abs(weights[int(i)] - float(w)) for i, w in expected.items())])
    for row, (vectors, expected) in enumerate(zip(ours.colbert, reference["colbert_vecs"], strict=True)):
        assert vectors.shape == expected.shape, f"text {row}: colbert vectors {vectors.shape} != {expected.shape}"
        colbert = max(colbert, float(np.abs(vectors - expected).max()))
    return {"dense": float(np.abs(ours.dense - reference["dense_vecs"]).max()), "lexical": lexical,
            "colbert": colbert}
