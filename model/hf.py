"""Load Hugging Face checkpoint directories into our Encoder: config.json, weights, tokenizer.json.

Supported: the base model and the ...ForSequenceClassification, ...ForTokenClassification and
...ForMaskedLM heads of the encoder families in model/families/ (BERT, RoBERTa, XLM-RoBERTa, CamemBERT,
DistilBERT, MPNet, ModernBERT, and the rotary NomicBERT, GTE and jina-embeddings-v3), and the base model,
...ForSequenceClassification and ...ForCausalLM (its body: the embedders built on decoders ship as causal LMs) of
the decoder families (Llama, Mistral, Qwen2, Qwen3,
Gemma3), the vision families ViT (ViTModel, ViTForImageClassification) and DINOv2 (model/families/vision.py),
which read pixels and have no tokenizer.json (how an image becomes pixel values is their preprocessor_config.json's,
read by the torch-free bundle/preprocessing.py), and the towers of CLIP and SigLIP
(model/families/towers.py; a two-tower checkpoint one tower at a time, model/towers.py); config.json's architectures
says which, and anything else is refused with the list of what loads.
A sentence-transformers directory (modules.json) loads as its embedding
pipeline (model/sentence.py): the bare encoder, its pooling, Dense projection and normalisation, its
max_seq_length and prompts. A directory with FlagEmbedding's colbert_linear.pt and sparse_linear.pt beside the
encoder is bge-m3 (model/bge_m3.py): its dense vector, token vectors and token weights, all from one pass.
These are three layouts of model/layouts.py's registry, each with its own loader here (load_hf,
load_sentence_transformers, load_bge_m3) over one body; the checkpoint's names go through the weight-table engine
(model/families/tables.py).
Weights come from model.safetensors, or from pytorch_model.bin through torch.load(weights_only=True); never from an
unrestricted pickle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from torch import Tensor

from model.bge_m3 import read_bge_m3
from model.checkpoint import LoadedModel
from model.config import EncoderConfig
from model.encoder import Encoder
from model.families import Family, family_of, rename
from model.sentence import SentenceModules, load_weights, read_json, read_sentence_modules
from model.sentencepiece import SPIECE, siglip_tokenizer
from model.tokenizer import load_tokenizer
from model.towers import SCALARS, tower_config


def is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and "model_type" in read_json(path / "config.json")


def load_hf(path: Path, tower: str | None = None) -> LoadedModel:
    """A Hugging Face directory: the encoder with the head its config.json's architectures names; `tower` ("vision",
    "text"): that tower of a two-tower checkpoint (model/towers.py)."""
    return _load(Path(path), sentence=False, bge_m3=False, tower=tower)


def load_sentence_transformers(path: Path, weights: dict[str, Tensor] | None = None) -> LoadedModel:
    """A sentence-transformers directory: the bare encoder and the pipeline modules.json lists (model/sentence.py);
    `weights`: the checkpoint's tensors as another layout has read them (model/jina_lora.py), else its files'."""
    return _load(Path(path), sentence=True, bge_m3=False, weights=weights)


def load_bge_m3(path: Path) -> LoadedModel:
    """bge-m3 as FlagEmbedding writes it (model/bge_m3.py), with its modules.json where it has one (BAAI/bge-m3 has)."""
    return _load(Path(path), sentence=True, bge_m3=True)


def _load(path: Path, sentence: bool, bge_m3: bool, tower: str | None = None,
          weights: dict[str, Tensor] | None = None) -> LoadedModel:
    """The directory's encoder; `sentence`: with its sentence-transformers modules (when modules.json is there),
    `bge_m3`: with FlagEmbedding's heads (when their files are there); `tower`: a two-tower checkpoint's; `weights`:
    its tensors already read (else load_weights reads them)."""
    hf = tower_config(read_json(_require(path, "config.json")), tower)
    family, kind = family_of(hf)
    tokenizer = _tokenizer(path, family)
    modules = read_sentence_modules(path) if sentence else None
    m3 = read_bge_m3(path, tokenizer, family.config(hf)["d_model"]) if bge_m3 and tokenizer is not None else None
    if modules is not None or kind == "lm" or m3 is not None:
        kind = "none"  # sentence-transformers and bge-m3 embed with the bare encoder, whatever head it was saved with
    state = rename(load_weights(path) if weights is None else weights, family, kind, hf)
    pair = {name: float(state.pop(name)) for name in SCALARS if name in state}  # the pair's, into the config
    config = encoder_config(hf, family, kind, state, modules).replace(**pair)
    if m3 is not None:
        config, state = config.replace(**m3.fields), state | m3.weights
    encoder = Encoder(config)
    if modules is not None:
        state |= modules.projection_weights
    encoder.load_state_dict(tie_decoder(state, config), strict=True)
    return LoadedModel(
        encoder.eval(), tokenizer, "bge-m3" if m3 else "sentence-transformers" if modules else f"hf-{family.name}",
        path, prompts=modules.prompts if modules else {},
        default_prompt_name=modules.default_prompt_name if modules else None,
        multi_vector=m3.spec if m3 else None,
    )


def _tokenizer(path: Path, family: Family) -> Tokenizer | None:
    """tokenizer.json: required for a text encoder, none for a vision one; a text tower of a pair may lack it: SigLIP
    ships a SentencePiece model, converted here (model.sentencepiece), and without one LoadedModel.tokenizer says so."""
    if family.modality == "vision":
        return None
    if family.pair and not (path / "tokenizer.json").is_file():
        return siglip_tokenizer(path) if (path / SPIECE).is_file() else None
    return load_tokenizer(_require(path, "tokenizer.json"))


def sequence_head(path: Path) -> dict[str, Any]:
    """The EncoderConfig fields of the family's own sequence-classification head for the checkpoint at `path`
    (from its config.json, whatever head it was saved with; a decoder's: the bias-free linear `score` on the last
    token): BERT's, NomicBERT's and GTE's tanh pooler, RoBERTa's, XLM-R's, jina-v3's and MPNet's
    dense-tanh-out, DistilBERT's ReLU pre-classifier, ModernBERT's dense-activation-norm over [CLS] or the mean."""
    hf = read_json(_require(Path(path), "config.json"))
    family, _ = family_of(hf)
    return family.head_config(hf, "sequence")


def _require(path: Path, name: str) -> Path:
    if not (path / name).is_file():
        raise FileNotFoundError(f"{path} is not a loadable Hugging Face model directory: {name} is missing")
    return path / name


def encoder_config(hf: dict[str, Any], family: Family, kind: str, state: dict[str, Tensor],
                   sentence: SentenceModules | None) -> EncoderConfig:
    fields = {**family.config(hf), **family.head_config(hf, kind)}
    if kind in ("sequence", "tokens", "image"):
        labels = _labels(hf, state["head.classifier.weight"].shape[0])
        fields.update(num_labels=len(labels), label_names=labels)
    if fields.get("projection_size") and "projection.linear.weight" not in state:
        fields.update(projection_size=0, projection_activation="identity")  # a ViTModel saved without its pooler
    if sentence is None:
        return EncoderConfig(**{"pooling": "cls", **fields})
    config = EncoderConfig(**{**fields, "pooling": sentence.pooling, "normalize": sentence.normalize,
                              **sentence.projection})
    return config.replace(max_seq_length=min(sentence.max_seq_length, config.position_limit))


def _labels(hf: dict[str, Any], count: int) -> tuple[str, ...]:
    id2label = hf.get("id2label") or {}
    return tuple(str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(count))


def tie_decoder(state: dict[str, Tensor], config: EncoderConfig) -> dict[str, Tensor]:
    """A tied MLM decoder reads the token embedding matrix (checkpoints store it once, under the embedding)."""
    if config.head == "mlm" and config.tie_decoder:
        state = {**state, "head.decoder.weight": state["embeddings.token.weight"]}
    return state
