"""The real all-MiniLM-L6-v2, loaded through our encoder, against `transformers` with mean pooling."""

from __future__ import annotations

import pytest
import torch
import transformers

from model.load import load_model
from model.tokenizer import encode
from model.training.assets import minilm_dir

pytestmark = pytest.mark.default_model

SUBJECTS = ["The film", "This phone", "My landlord", "The new policy", "Our team", "Grandma's soup",
            "The Rust compiler", "A quiet morning", "That referee", "La tour Eiffel"]
VERBS = ["is wonderful", "was a disaster, honestly", "surprised everyone at the meeting on 3 May 2024",
         "needs more salt; otherwise fine!", "costs $1,299 and weighs 180 g"]


def fifty_texts() -> list[str]:
    texts = [f"{s} {v}" for s in SUBJECTS for v in VERBS]
    texts[7] = "ok"
    texts[13] = "Ünïcödé, emoji 🙂 and CJK 注意力机制 in one line."
    texts[21] = " ".join(["a long sentence about attention maps"] * 40)  # longer than 256 tokens
    return texts


@pytest.fixture(scope="module")
def minilm():
    return load_model(minilm_dir())


def test_minilm_sentence_embeddings_match_transformers(minilm) -> None:
    texts = fifty_texts()
    ids, mask = encode(minilm.tokenizer, texts, 256)
    reference = transformers.AutoModel.from_pretrained(minilm_dir()).eval()
    with torch.no_grad():
        ours = minilm.encoder(ids, mask).embedding
        states = reference(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((states * m).sum(1) / m.sum(1), dim=-1)
    cosine = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
    assert len(texts) == 50
    assert cosine.min().item() >= 0.99999
    assert minilm.encoder.config.pooling == "mean" and minilm.encoder.config.normalize
    assert minilm.encoder.config.serving_length == 256  # sentence_bert_config.json max_seq_length


def test_minilm_finds_the_similar_sentence(minilm) -> None:
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply."]
    ids, mask = encode(minilm.tokenizer, texts, 64)
    with torch.no_grad():
        emb = minilm.encoder(ids, mask).embedding
    assert (emb[0] @ emb[1]) > (emb[0] @ emb[2]) + 0.3
