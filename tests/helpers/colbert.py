"""Random-weight ColBERT checkpoints as their own libraries write them, and those libraries as the reference.

    save_pylate(directory, "tiny")    a PyLate folder: pylate.models.ColBERT over a small BERT (its Transformer at
                                      the root, a bias-free 1_Dense projection), "[Q] " / "[D] " added to the
                                      tokenizer and the embeddings resized by PyLate itself, saved by ColBERT.save;
                                      with the PyLate model that saved it, the reference
    save_colbert_ai(directory, ...)   a colbert-ai checkpoint: HF_ColBERT (bert.* + a bias-free linear) saved by
                                      save_pretrained, its tokenizer and artifact.metadata (ColBERTConfig)
    colbert_ai_reference                      the colbert-ai checkpoint loaded back by colbert-ai (CPU, eager)
    mve_reference / mve_queries               sentence-transformers 6.3's MultiVectorEncoder reading the PyLate
                                              folder, and its expanded queries: PyLate 1.6 itself no longer expands
                                              queries under sentence-transformers 6.3 (see pylate_vectors)
    pylate_vectors / colbert_ai_vectors       their per-text token vectors (queries: every expanded position;
                                              documents: the skip-list and padding dropped), as numpy
    pylate_scores / colbert_ai_scores         their MaxSim of each query against each document
    build_case(root, shape)                   both layouts at a shape with all of the above computed once

The PyLate documents' reference is PyLate's own encode, not the MultiVectorEncoder: sentence-transformers 6.3 leaves
the [UNK] id out of the skip-list (it warns so), where PyLate drops a document's unknown tokens.

Shapes: "tiny" (hidden 32, 2 layers, 2 heads of 16, M 16, queries of 12, documents of 48) and "realistic" (hidden
128, 4 layers, 2 heads of 64, M 32, queries of 32, documents of 180: DOCUMENTS' longest runs past 100 tokens). The
vocabulary is a BERT WordPiece trained on tests/helpers/tokenizers.MULTILINGUAL with [unused0] / [unused1] (colbert-ai's
markers, as bert-base-uncased has them); several of string.punctuation are not in it, so both libraries' skip-lists
hold the [UNK] id as well (convert_tokens_to_ids of a missing symbol), and a document's unknown tokens are dropped.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tests.helpers.tokenizers import MULTILINGUAL, frozen

SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden=32, heads=2, layers=2, ffn=64, size=16, query_length=12, document_length=48),
    "realistic": dict(hidden=128, heads=2, layers=4, ffn=256, size=32, query_length=32, document_length=180),
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", "[unused1]"]
QUERIES = ["What is the capital of France?", "quick fox", "Москва и Санкт-Петербург: где?",
           "a b c d e f g h i j k l m n o p q r s t u v w x y z one two three four five six seven"]
DOCUMENTS = [
    "Paris is the capital of France, on the Seine.",
    "The quick brown fox jumps over the lazy dog 123 times!",
    " ".join(MULTILINGUAL[:9]),  # ~100 tokens, many scripts and punctuation
    " ".join(MULTILINGUAL * 2),  # past 180 tokens: truncated to the document length
    "§§ ## $$ %% &&: punctuation, unknown (~) symbols; and ^text^.",
]


@frozen
def colbert_wordpiece() -> Tokenizer:
    """BERT's uncased WordPiece with [CLS] A [SEP], trained offline, [unused0] and [unused1] in its vocabulary
    (saved: tests.helpers.tokenizers.FROZEN)."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=400, min_frequency=1, special_tokens=SPECIALS)
    tokenizer.train_from_iterator(MULTILINGUAL * 3 + DOCUMENTS[:2], trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer


def save_bert(directory: Path, shape: str, seed: int = 0) -> Path:
    """A seeded random BertModel of `shape` with the WordPiece tokenizer, biases and norms moved off their start."""
    s, tokenizer = SHAPES[shape], colbert_wordpiece()
    config = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=s["hidden"], num_attention_heads=s["heads"],
        num_hidden_layers=s["layers"], intermediate_size=s["ffn"], max_position_embeddings=256)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.BertModel(config)
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() == 1:
                    param.add_(torch.randn_like(param) * 0.1)
    model.save_pretrained(directory)
    tokenizer.save(str(Path(directory) / "tokenizer.json"))
    return Path(directory)


def save_pylate(directory: Path, shape: str, attend_to_expansion: bool = False, seed: int = 0,
                modernbert: bool = False, bias: bool = False) -> tuple[Path, Any]:
    """A PyLate folder at directory/"pylate" (its BERT saved first under directory/"hf"), written by PyLate, and
    the PyLate model that wrote it (eager attention), the reference. `modernbert`: over tests/helpers/families.py's
    "wide" ModernBERT instead (hidden 48, local layers), its window (24) wider than a query's expansion tail, as
    GTE-ModernColBERT's (128) is wider than its 32-token queries. `bias`: a Dense with a bias (PyLate's bias=True).

    Built from modules (a Transformer and PyLate's bias-free Dense), as PyLate's docs also do: with the
    sentence-transformers 6.3 the tests pin, ColBERT(model_name_or_path=a bare BERT) gets a Pooling module from
    sentence-transformers and fails, and ColBERT(a saved PyLate folder) fails in Dense.load (module_input_name), so
    the model that saved the folder is the reference rather than one read back from it; two attributes PyLate 1.6
    reads under their sentence-transformers 5 names are set on it (nothing it computes changes)."""
    from pylate.models import ColBERT, Dense
    from sentence_transformers.models import Transformer

    s = SHAPES[shape]
    if modernbert:
        from tests.helpers.families import save_hf

        source, hidden = Path(directory) / "hf", 48
        save_hf(source, "modernbert", "Model", "wide", seed=seed, local_attention=24)
    else:
        source, hidden = save_bert(Path(directory) / "hf", shape, seed), s["hidden"]
    with warnings.catch_warnings(), torch.random.fork_rng():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed + 1)  # the Dense projection's and the added [Q] / [D] embeddings' initialisation
        transformer = Transformer(str(source), model_kwargs={"attn_implementation": "eager"})
        dense = Dense(hidden, s["size"], bias=bias)
        if bias:
            with torch.no_grad():
                dense.linear.bias.normal_(0.0, 0.5)  # off its start, so a missing bias shows
        model = ColBERT(modules=[transformer, dense], device="cpu", query_length=s["query_length"],
                        document_length=s["document_length"], attend_to_expansion_tokens=attend_to_expansion)
        model._model_config = model._get_model_config()  # ColBERT.save reads it; sentence-transformers 6 renamed it
        model._text_length = len  # ColBERT.encode sorts by it (a text's length); sentence-transformers 6 renamed it
        model.save(str(Path(directory) / "pylate"))
    return Path(directory) / "pylate", model.eval()


def colbert_ai_under_transformers_5() -> None:
    """colbert-ai 0.2.22 was written for transformers 4: its HF_ColBERT lists _keys_to_ignore_on_load_unexpected
    (transformers 5 joins it with a set) and calls init_weights rather than post_init (so transformers 5's
    all_tied_weights_keys is never set; BERT ties nothing here). Its class_factory is wrapped, where colbert-ai
    imports it, to set those two on the classes it makes; nothing it computes changes."""
    import colbert.modeling.base_colbert as base_colbert
    import colbert.modeling.hf_colbert as hf_colbert
    import colbert.modeling.tokenization.doc_tokenization as doc_tokenization
    import colbert.modeling.tokenization.query_tokenization as query_tokenization

    factory = getattr(hf_colbert.class_factory, "__wrapped__", hf_colbert.class_factory)

    def class_factory(name_or_path: str) -> type:
        cls = factory(name_or_path)
        cls._keys_to_ignore_on_load_unexpected = {r"cls"}
        cls.all_tied_weights_keys = {}
        return cls

    class_factory.__wrapped__ = factory  # type: ignore[attr-defined]
    for module in (hf_colbert, base_colbert, doc_tokenization, query_tokenization):
        module.class_factory = class_factory  # type: ignore[attr-defined]


def save_colbert_ai(directory: Path, shape: str, attend_to_expansion: bool = False, seed: int = 0) -> Path:
    """A colbert-ai checkpoint at directory/"colbert-ai": HF_ColBERT saved by save_pretrained over a BERT saved first
    under directory/"hf-ai", with its tokenizer and ColBERTConfig's artifact.metadata."""
    import colbert.modeling.hf_colbert as hf_colbert
    from colbert.infra import ColBERTConfig

    colbert_ai_under_transformers_5()
    s = SHAPES[shape]
    source = save_bert(Path(directory) / "hf-ai", shape, seed)
    target = Path(directory) / "colbert-ai"
    config = ColBERTConfig(dim=s["size"], query_maxlen=s["query_length"], doc_maxlen=s["document_length"],
                           attend_to_mask_tokens=attend_to_expansion, mask_punctuation=True)
    with warnings.catch_warnings(), torch.random.fork_rng():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed + 1)
        model = hf_colbert.class_factory(str(source)).from_pretrained(str(source), colbert_config=config)
        with torch.no_grad():
            model.linear.weight.normal_(0.0, 0.1)
        model.save_pretrained(str(target))
        transformers.AutoTokenizer.from_pretrained(str(source)).save_pretrained(str(target))
    config.save_for_checkpoint(str(target))
    return target


def colbert_ai_reference(path: Path) -> Any:
    """colbert-ai's Checkpoint on CPU; its C++ MaxSim extension is not compiled (scores use colbert_score)."""
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint
    from colbert.modeling.colbert import ColBERT

    colbert_ai_under_transformers_5()
    ColBERT.loaded_extensions = True  # try_load_torch_extensions would build segmented_maxsim.cpp; unused here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = Checkpoint(str(path), ColBERTConfig.load_from_checkpoint(str(path)), verbose=0)
    checkpoint.bert.set_attn_implementation("eager")
    return checkpoint.eval()


def pylate_vectors(model: Any, texts: list[str], is_query: bool) -> list[np.ndarray]:
    """PyLate's ColBERT.encode. Under sentence-transformers 6.3 its queries are not expanded (the Transformer's
    tokenize no longer takes PyLate's padding="max_length"): expanded queries come from mve_vectors."""
    return [np.asarray(v) for v in model.encode(texts, is_query=is_query, batch_size=8)]


def mve_reference(path: Path) -> Any:
    """sentence-transformers 6.3's MultiVectorEncoder reading the PyLate folder (it reads PyLate saves, and
    expands queries as PyLate does: padded to query_length with [MASK], not attended unless configured)."""
    from sentence_transformers import MultiVectorEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MultiVectorEncoder(str(path), device="cpu", model_kwargs={"attn_implementation": "eager"})


def mve_queries(model: Any, texts: list[str]) -> list[np.ndarray]:
    return [np.asarray(v) for v in model.encode_query(texts, convert_to_numpy=True)]


def pylate_scores(query_vectors: list[np.ndarray], document_vectors: list[np.ndarray]) -> np.ndarray:
    """(queries, documents) PyLate's colbert_scores (MaxSim summed over query tokens) of their vectors."""
    from pylate.scores import colbert_scores

    q, d = [torch.from_numpy(v) for v in query_vectors], [torch.from_numpy(v) for v in document_vectors]
    return np.array([[float(colbert_scores(qi[None], di[None], backend="torch")[0, 0]) for di in d] for qi in q])


def colbert_ai_vectors(checkpoint: Any, texts: list[str], is_query: bool) -> list[np.ndarray]:
    """Queries: queryFromText, every position (the expansion [MASK]s kept); documents: docFromText(keep_dims=False),
    the skip-list and padding dropped."""
    with torch.no_grad():
        if is_query:
            return [q.float().numpy() for q in checkpoint.queryFromText(texts)]
        return [d.float().numpy() for d in checkpoint.docFromText(texts, keep_dims=False)]


def colbert_ai_scores(checkpoint: Any, queries: list[str], documents: list[str]) -> np.ndarray:
    """(queries, documents) colbert-ai's colbert_score over its padded documents and their mask."""
    from colbert.modeling.colbert import colbert_score

    with torch.no_grad():
        q = checkpoint.queryFromText(queries)
        ids, mask = checkpoint.doc_tokenizer.tensorize(documents)
        d, d_mask = checkpoint.doc(ids, mask, keep_dims="return_mask")
        return np.stack([colbert_score(q[i:i + 1], d, d_mask, config=checkpoint.colbert_config).float().numpy()
                         for i in range(len(q))])


def build_case(root: Path, shape: str) -> dict[str, Any]:
    """Both layouts at `shape` under `root` with their references' vectors and scores of QUERIES and DOCUMENTS; the
    realistic shape's queries attend to their expansion tokens (PyLate's attend_to_expansion_tokens, colbert-ai's
    attend_to_mask_tokens), the tiny one's do not."""
    attend = shape == "realistic"
    pylate_dir, pylate_model = save_pylate(root, shape, attend_to_expansion=attend)
    colbert_ai_dir = save_colbert_ai(root, shape, attend_to_expansion=attend, seed=3)
    mve, checkpoint = mve_reference(pylate_dir), colbert_ai_reference(colbert_ai_dir)
    pylate = dict(queries=mve_queries(mve, QUERIES), documents=pylate_vectors(pylate_model, DOCUMENTS, is_query=False))
    colbert_ai = dict(queries=colbert_ai_vectors(checkpoint, QUERIES, is_query=True),
                      documents=colbert_ai_vectors(checkpoint, DOCUMENTS, is_query=False))
    pylate["scores"] = pylate_scores(pylate["queries"], pylate["documents"])
    colbert_ai["scores"] = colbert_ai_scores(checkpoint, QUERIES, DOCUMENTS)
    return dict(shape=shape, pylate_dir=pylate_dir, colbert_ai_dir=colbert_ai_dir, pylate=pylate,
                colbert_ai=colbert_ai, pylate_model=pylate_model)


def assert_equal_vectors(got: list[np.ndarray], want: list[np.ndarray], tolerance: float = 1e-5) -> None:
    """As many vectors per input as the reference's, each within `tolerance` (max abs)."""
    assert [g.shape for g in got] == [w.shape for w in want]
    worst = max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))
    assert worst <= tolerance, worst


def metadata(path: Path) -> dict[str, Any]:
    return json.loads((Path(path) / "artifact.metadata").read_text())
