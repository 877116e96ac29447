"""The model names users name most, each built as its hub repository is laid out (config.json fields, the
sentence-transformers module files, the custom-code config where the repository has one) at a tiny shape (2 layers,
hidden 32, a vocabulary trained by tests/helpers/tokenizers) with random weights, and what the pipeline a user would
otherwise call returns for it: sentence-transformers for embedding models (with their prompts), CrossEncoder for a
cross-encoder, the family's own reference (FlagEmbedding, colbert-ai, Qwen3-Reranker's scoring, SPLADE through
sentence-transformers' SparseEncoder).

    build(row, directory) -> Expected    the repository's files at `directory`, and the reference's answers

Each builder reuses the family helpers (tests/helpers/sentence.py, decoders.py, rotary.py, bge_m3.py, colbert.py,
families.py). Every row is served: a layout `--model` refuses is tested by tests/hub/test_refusals.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers import tokenizers
from tests.helpers.exports import QWEN3_PROMPTS
from tests.helpers.tokenizers import MULTILINGUAL

TEXTS = MULTILINGUAL[:4]
QUERY = "Where is the capital of France?"
DOCUMENTS = TEXTS  # what the rerankers score QUERY against
MAX_SEQ = 48  # every test text fits; under the tiny models' 64 positions
XLMR_TOKENS = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "cls_token": "<s>",
               "eos_token": "</s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
               "mask_token": "<mask>"}
BERT_TOKENS = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "unk_token": "[UNK]", "pad_token": "[PAD]",
               "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]"}
QWEN3_TOKENS = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                "bos_token": None, "unk_token": None, "add_prefix_space": False, "padding_side": "left"}
GEMMA_TOKENS = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                "unk_token": "<unk>", "mask_token": "<mask>", "add_bos_token": True, "add_eos_token": True,
                "padding_side": "right"}
GEMMA_PROMPTS = {"query": "task: search result | query: ", "document": "title: none | text: ",
                 "Clustering": "task: clustering | query: ", "STS": "task: sentence similarity | query: "}
NOMIC_PROMPTS = {"search_query": "search_query: ", "search_document": "search_document: ",
                 "classification": "classification: ", "clustering": "clustering: "}
JINA_TASKS = {"retrieval.query": "Represent the query for retrieving evidence documents: ",
              "retrieval.passage": "Represent the document for retrieval: ", "separation": "", "classification": "",
              "text-matching": ""}


@dataclass
class Expected:
    """The reference's answers: embeddings by prompt name (None: the model's default) and by task, scores of QUERY
    against DOCUMENTS, sparse vectors (N, V) of TEXTS, and token vectors of documents and of queries."""

    embeddings: dict[str | None, np.ndarray] = field(default_factory=dict)
    scores: np.ndarray | None = None
    sparse: np.ndarray | None = None
    documents: list[np.ndarray] | None = None
    queries: list[np.ndarray] | None = None
    tasks: dict[str, np.ndarray] = field(default_factory=dict)  # embeddings by task (adapter), its prompt applied


@dataclass(frozen=True)
class Row:
    name: str  # the hub repository
    serves: str  # embedding, rerank, sparse, multi-vector
    build: Callable[[Path], Expected]
    reranker: str | None = None  # the --reranker recipe it needs

    @property
    def alias(self) -> str:
        """The name it is served under beside the others (one model alone is served under `name`)."""
        return self.name.rpartition("/")[2]


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))


def edit_config(directory: Path, drop: tuple[str, ...] = (), **fields: Any) -> None:
    """config.json at `directory` with `drop` left out and `fields` set, as the real repository writes it."""
    config = {k: v for k, v in json.loads((directory / "config.json").read_text()).items() if k not in drop}
    write_json(directory / "config.json", {**config, **fields})


def sentence_embeddings(directory: Path, names: tuple[str | None, ...] = (None,)) -> dict[str | None, np.ndarray]:
    """SentenceTransformer(directory).encode(TEXTS) under each prompt name (None: the model's default)."""
    from tests.helpers.sentence import load_reference

    model: Any = load_reference(directory)
    return {name: model.encode(TEXTS, prompt_name=name, convert_to_numpy=True) for name in names}


def sentence_repo(directory: Path, names: tuple[str | None, ...], **options: Any) -> Expected:
    """tests/helpers/sentence.save_sentence_transformer at `directory`, its transformer's own folder removed (the
    real repository holds the modules at its root)."""
    from tests.helpers.sentence import save_sentence_transformer

    save_sentence_transformer(directory, max_seq_length=MAX_SEQ, **options)
    expected = Expected(embeddings=sentence_embeddings(directory, names))
    shutil.rmtree(directory / "hf")
    return expected


def all_minilm(directory: Path) -> Expected:
    """BertModel, mean pooling, Normalize; no prompts."""
    return sentence_repo(directory, (None,), arch="bert", pooling="mean", prompts={},
                         tokenizer_config=BERT_TOKENS)


def multilingual_e5(directory: Path) -> Expected:
    """A BertModel with XLM-R's SentencePiece (Unigram) vocabulary, mean pooling, Normalize; no prompts (its users
    write "query: " and "passage: " into the text)."""
    from transformers import BertModel

    from tests.helpers.families import hf_config, save_random
    from tests.helpers.sentence import wrap_sentence_transformer

    tokenizer, source = tokenizers.unigram(), directory.parent / f"{directory.name}-hf"
    save_random(source, BertModel, hf_config("bert", "small", tokenizer.get_vocab_size()), tokenizer, seed=5)
    write_json(source / "tokenizer_config.json", XLMR_TOKENS)
    wrap_sentence_transformer(directory, source, "mean", max_seq_length=MAX_SEQ, prompts={})
    return Expected(embeddings=sentence_embeddings(directory))


def qwen3_embedding(directory: Path) -> Expected:
    """Qwen3 under last-token pooling and Normalize, its query instruction as a prompt, left padding; config.json
    names Qwen3ForCausalLM over a body without the LM head, as the real one does."""
    expected = sentence_repo(directory, (None, "query"), arch="qwen3", pooling="lasttoken", prompts=QWEN3_PROMPTS,
                             tokenizer=tokenizers.qwen_bpe(), tokenizer_config=QWEN3_TOKENS, seed=1)
    edit_config(directory, architectures=["Qwen3ForCausalLM"])
    return expected


def embeddinggemma(directory: Path) -> Expected:
    """Gemma3TextModel (bidirectional), mean pooling, two bias-free Identity Dense modules, Normalize; its prompts."""
    return sentence_repo(directory, (None, "query", "document"), arch="embeddinggemma", pooling="mean",
                         dense="identity", denses=2, prompts=GEMMA_PROMPTS, tokenizer=tokenizers.gemma_bpe(),
                         tokenizer_config=GEMMA_TOKENS, seed=2)


def bge_m3(directory: Path) -> Expected:
    """XLMRobertaModel with colbert_linear.pt and sparse_linear.pt, and its sentence-transformers files (CLS pooling,
    Normalize); FlagEmbedding's dense vectors, lexical weights (as (N, V)) and ColBERT vectors."""
    from tests.helpers.bge_m3 import encode_reference, reference_model, save_bge_m3

    save_bge_m3(directory, "tiny", seed=3)
    write_json(directory / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    write_json(directory / "1_Pooling" / "config.json", {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
                                                         "pooling_mode_mean_tokens": False})
    (directory / "2_Normalize").mkdir()
    write_json(directory / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ, "do_lower_case": False})
    found = encode_reference(reference_model(directory), DOCUMENTS, MAX_SEQ)
    lexical = np.zeros((len(DOCUMENTS), tokenizers.unigram().get_vocab_size()), dtype=np.float32)  # (N, V)
    for row, weights in enumerate(found["lexical_weights"]):
        for token, weight in weights.items():
            lexical[row, int(token)] = weight
    return Expected(embeddings={None: np.asarray(found["dense_vecs"])}, sparse=lexical,
                    documents=[np.asarray(v) for v in found["colbert_vecs"]])


def nomic_embed(directory: Path) -> Expected:
    """NomicBertModel under mean pooling with nomic's prompts; config.json as the released custom code writes it
    (GPT-2 style names, auto_map to nomic-ai/nomic-bert-2048). The reference: sentence-transformers over
    transformers' NomicBert with the same weights (its config in transformers' names)."""
    from tests.helpers.rotary import save_rotary
    from tests.helpers.sentence import wrap_sentence_transformer

    source = directory.parent / f"{directory.name}-hf"
    save_rotary(source, "nomic_bert", "Model", "tiny", seed=4)
    write_json(source / "tokenizer_config.json", BERT_TOKENS)
    wrap_sentence_transformer(directory, source, "mean", normalize=False, max_seq_length=MAX_SEQ,
                              prompts=NOMIC_PROMPTS)
    expected = Expected(embeddings=sentence_embeddings(directory, (None, "search_query")))
    write_json(directory / "config.json", nomic_released(json.loads((directory / "config.json").read_text())))
    return expected


def nomic_released(native: dict[str, Any]) -> dict[str, Any]:
    """A NomicBert config.json in transformers' names as nomic's custom code writes it (nomic-embed-text-v1.5's)."""
    return {
        "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "activation_function": "swiglu",
        "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                     "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"},
        "n_embd": native["hidden_size"], "n_head": native["num_attention_heads"],
        "n_layer": native["num_hidden_layers"], "n_inner": native["intermediate_size"],
        "n_positions": native["max_position_embeddings"], "layer_norm_epsilon": native["layer_norm_eps"],
        "rotary_emb_base": native["rope_parameters"]["rope_theta"], "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False, "rotary_scaling_factor": None, "prenorm": False, "qkv_proj_bias": False,
        "mlp_fc1_bias": False, "mlp_fc2_bias": False, "causal": False, "type_vocab_size": native["type_vocab_size"],
        "vocab_size": native["vocab_size"], "pad_token_id": 0, "use_flash_attn": True, "fused_bias_fc": True,
        "torch_dtype": "float32"}


def gte_multilingual(directory: Path) -> Expected:
    """Alibaba's "new" model (custom code, auto_map to Alibaba-NLP/new-impl): model_type new, NewModel, packed qkv,
    static NTK rope scaling (theta 20,000, factor 8); CLS pooling and Normalize. The reference is transformers' Gte
    with that scaling as its native conversions write it: linear, theta 160,000, factor 8 ** (2 / head size)."""
    from tests.helpers.rotary import SHAPES, save_rotary
    from tests.helpers.sentence import wrap_sentence_transformer

    source = directory.parent / f"{directory.name}-hf"
    head_size = SHAPES["tiny"]["hidden_size"] // SHAPES["tiny"]["num_attention_heads"]
    save_rotary(source, "gte", "Model", "tiny", seed=6,
                rope_parameters={"rope_type": "linear", "rope_theta": 160_000.0, "factor": 8.0 ** (2 / head_size)})
    write_json(source / "tokenizer_config.json", XLMR_TOKENS)
    wrap_sentence_transformer(directory, source, "cls", max_seq_length=MAX_SEQ, prompts={})
    expected = Expected(embeddings=sentence_embeddings(directory))
    edit_config(directory, drop=("rope_parameters",), model_type="new", architectures=["NewModel"],
                auto_map={"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                          "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel"},
                position_embedding_type="rope", rope_theta=20000, rope_scaling={"type": "ntk", "factor": 8.0},
                pack_qkv=True, layer_norm_type="layer_norm", unpad_inputs=False,
                use_memory_efficient_attention=False, logn_attention_scale=False)
    return expected


def jina_v3(directory: Path) -> Expected:
    """jina-embeddings-v3 as released (tests/helpers/jina.py): model_type xlm-roberta with rotary positions
    (rotary_emb_base), auto_map to jinaai/xlm-roberta-flash-implementation, its body under roberta. in bfloat16 with
    its task LoRAs inside as torch parametrizations, stacked over lora_adaptations; mean pooling and Normalize with
    the task instructions as prompts. The reference: sentence-transformers over transformers' JinaEmbeddingsV3Model
    with the base weights, and with each task's LoRA merged into them, under that task's prompt."""
    from tests.helpers.jina import merged, save_released
    from tests.helpers.sentence import load_reference

    released = save_released(directory, "tiny", seed=7)
    model: Any = load_reference(released.sentence)  # type: ignore[arg-type]
    tasks = list(JINA_TASKS)
    expected = Expected(embeddings={None: model.encode(TEXTS, convert_to_numpy=True)})
    for name in ("retrieval.query", "retrieval.passage", "text-matching"):
        with merged(model[0].auto_model, released.lora, tasks.index(name)):
            expected.tasks[name] = model.encode(TEXTS, prompt_name=name, convert_to_numpy=True)
    return expected


def bge_reranker(directory: Path) -> Expected:
    """XLMRobertaForSequenceClassification with one label; CrossEncoder's scores (a sigmoid over the logit), its
    pairs longer than the model's 64 tokens cut longest-first, as attnserve cuts them."""
    from sentence_transformers import CrossEncoder

    from tests.helpers.families import RELEVANCE, save_hf

    save_hf(directory, "xlm-roberta", "ForSequenceClassification", seed=8, names=RELEVANCE, initializer_range=0.2)
    write_json(directory / "tokenizer_config.json", XLMR_TOKENS)
    model = CrossEncoder(str(directory), device="cpu", max_length=64,  # the model's limit: pairs are cut to it
                         model_kwargs={"attn_implementation": "eager"})
    return Expected(scores=np.asarray(model.predict([(QUERY, d) for d in DOCUMENTS])))


def qwen3_reranker(directory: Path) -> Expected:
    """Qwen3ForCausalLM with Qwen's chat tokens; the model card's yes / no scoring."""
    from tests.helpers.decoders import reference_scores, reranker_tokenizer, save_decoder

    tokenizer = reranker_tokenizer()
    model = save_decoder(directory, "qwen3", "ForCausalLM", "small", seed=9, tokenizer=tokenizer,
                         max_position_embeddings=384)  # the recipe's prompt is 150 tokens here
    write_json(directory / "tokenizer_config.json", {**QWEN3_TOKENS, "pad_token": None})
    return Expected(scores=reference_scores(model, tokenizer, QUERY, DOCUMENTS))


def answerai_colbert(directory: Path) -> Expected:
    """A colbert-ai checkpoint (HF_ColBERT, artifact.metadata); colbert-ai's query and document vectors."""
    from tests.helpers.colbert import (
        DOCUMENTS as COLBERT_DOCUMENTS,
    )
    from tests.helpers.colbert import (
        QUERIES,
        colbert_ai_reference,
        colbert_ai_vectors,
        save_colbert_ai,
    )

    built = save_colbert_ai(directory.parent / f"{directory.name}-build", "tiny", seed=10)
    shutil.copytree(built, directory)
    checkpoint = colbert_ai_reference(directory)
    return Expected(documents=colbert_ai_vectors(checkpoint, COLBERT_DOCUMENTS[:3], is_query=False),
                    queries=colbert_ai_vectors(checkpoint, QUERIES[:2], is_query=True))


def splade(directory: Path) -> Expected:
    """BertForMaskedLM (no sentence-transformers files, as the repository holds); sentence-transformers'
    SparseEncoder over it (MLMTransformer, then SpladePooling: max over tokens of log(1 + relu(logits)))."""
    from sentence_transformers import SparseEncoder

    from tests.helpers.families import save_hf

    save_hf(directory, "bert", "ForMaskedLM", seed=11)
    write_json(directory / "tokenizer_config.json", BERT_TOKENS)
    model = SparseEncoder(str(directory), device="cpu", model_kwargs={"attn_implementation": "eager"})
    vectors = model.encode(TEXTS, convert_to_tensor=True)
    return Expected(sparse=vectors.to_dense().numpy())


ROWS: tuple[Row, ...] = (
    Row("Qwen/Qwen3-Embedding-0.6B", "embedding", qwen3_embedding),
    Row("google/embeddinggemma-300m", "embedding", embeddinggemma),
    Row("BAAI/bge-m3", "embedding, sparse, multi-vector", bge_m3),
    Row("nomic-ai/nomic-embed-text-v1.5", "embedding", nomic_embed),
    Row("sentence-transformers/all-MiniLM-L6-v2", "embedding", all_minilm),
    Row("intfloat/multilingual-e5-small", "embedding", multilingual_e5),
    Row("Alibaba-NLP/gte-multilingual-base", "embedding", gte_multilingual),
    Row("jinaai/jina-embeddings-v3", "embedding", jina_v3),
    Row("Qwen/Qwen3-Reranker-0.6B", "rerank", qwen3_reranker, reranker="qwen3"),
    Row("BAAI/bge-reranker-v2-m3", "rerank", bge_reranker),
    Row("answerdotai/answerai-colbert-small-v1", "multi-vector", answerai_colbert),
    Row("naver/splade-cocondenser-ensembledistil", "sparse", splade),
)
