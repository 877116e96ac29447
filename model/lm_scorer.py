"""LLM rerankers as one-label cross-encoders: a causal LM asked whether a document answers a query.

Qwen3-Reranker writes each (query, document) pair into its prompt and reads the language-model head at the last
position: the score is softmax over the "no" and "yes" logits, taken for "yes". A logit is a row of the head,
logit_t = h · W[t] (h the last token's state), so

    P(yes) = exp(h · W[yes]) / (exp(h · W[yes]) + exp(h · W[no])) = sigmoid(h · (W[yes] - W[no]))

which is a bias-free one-label linear head with weight W[yes] - W[no] over the last token, and a one-label model's
served score is the sigmoid of its logit: the same number, without the (T, vocabulary) logits ever computed.

The prompt travels in the bundle: the text around the pair (the system turn before it, the assistant's opening
after it) becomes the tokenizer's template, added around the pair's tokens as special tokens, exactly as the
reference tokenises prefix and suffix apart from the pair; the pair itself is written by the manifest's
`pair_format` and tokenised as one text, cut from the end when too long (the reference's truncation).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tokenizers import Tokenizer, processors
from torch import Tensor

from model.checkpoint import LoadedModel
from model.encoder import Encoder
from model.layouts import load_base
from model.sentence import load_weights, read_json

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


@dataclass(frozen=True)
class Recipe:
    """How a model family's LLM reranker writes and scores a pair."""

    yes: str  # the token whose probability is the score
    no: str  # the token it is weighed against
    prefix: str  # before the pair (tokenised on its own)
    suffix: str  # after the pair (tokenised on its own)
    pair_format: str  # the pair, with {instruction}, {query} and {document}


RECIPES = {
    "qwen3": Recipe(
        "yes", "no",
        prefix="<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
               "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n",
        suffix="<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        pair_format="<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}",
    ),
}


def load_lm_scorer(path: Path | str, recipe: str, instruction: str = DEFAULT_INSTRUCTION) -> LoadedModel:
    """The causal LM at `path` as a one-label cross-encoder by `recipe` (a key of RECIPES); model.load.load_model's
    `reranker` does the same and adds adapters and the source's files."""
    check_recipe(Path(path), recipe)
    return as_reranker(load_base(Path(path)), recipe, instruction)


def check_recipe(path: Path, recipe: str) -> Recipe:
    """The recipe by name, for the causal LM at `path`: refused before any loading when either does not fit."""
    if recipe not in RECIPES:
        raise ValueError(f"reranker recipe {recipe!r} is not known; known: {', '.join(RECIPES)}")
    architecture = (read_json(path / "config.json").get("architectures") or ["?"])[0]
    if not architecture.endswith("ForCausalLM"):
        raise ValueError(f"an LLM reranker is a causal LM (...ForCausalLM); {path} holds {architecture}")
    return RECIPES[recipe]


def as_reranker(loaded: LoadedModel, recipe: str, instruction: str = DEFAULT_INSTRUCTION) -> LoadedModel:
    """The loaded causal LM with its head replaced by the recipe's yes-minus-no row and its prompt in the
    tokenizer's template."""
    path, chosen = loaded.path, check_recipe(loaded.path, recipe)
    yes, no = (_token_id(loaded.tokenizer, token) for token in (chosen.yes, chosen.no))
    rows = _lm_head(path)
    config = loaded.encoder.config.replace(head="linear", head_bias=False, num_labels=1, label_names=("relevance",))
    encoder = Encoder(config)
    encoder.load_state_dict({**loaded.encoder.state_dict(), "head.classifier.weight": (rows[yes] - rows[no])[None]})
    tokenizer = with_template(loaded.tokenizer, chosen.prefix, chosen.suffix)
    pair_format = chosen.pair_format.replace("{instruction}", instruction)
    return replace(loaded, encoder=encoder.eval(), text_tokenizer=tokenizer, kind=f"{loaded.kind}-reranker",
                   pair_format=pair_format)


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"the tokenizer has no single token {token!r}, which the reranker's score reads")
    return token_id


def _lm_head(path: Path) -> Tensor:
    """The language-model head's (V, D) weight: lm_head, or the token embeddings it is tied to."""
    weights = load_weights(path)
    for name in ("lm_head.weight", "model.embed_tokens.weight", "embed_tokens.weight"):
        if name in weights:
            return weights[name].float()
    raise ValueError(f"{path}: neither lm_head.weight nor the token embeddings it may be tied to is in the weights")


def with_template(tokenizer: Tokenizer, prefix: str, suffix: str) -> Tokenizer:
    """A copy of `tokenizer` whose post-processor puts prefix's tokens before a sequence and suffix's after it
    (each tokenised on its own, no special tokens of their own added), in place of the one it had."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.post_processor = None
    parts = {name: copy.encode(text, add_special_tokens=False) for name, text in (("[PREFIX]", prefix),
                                                                                   ("[SUFFIX]", suffix))}
    copy.post_processor = processors.TemplateProcessing(
        single="[PREFIX] $A [SUFFIX]", pair="[PREFIX] $A $B:1 [SUFFIX]",
        special_tokens=[{"id": name, "ids": e.ids, "tokens": e.tokens} for name, e in parts.items()])
    return copy
