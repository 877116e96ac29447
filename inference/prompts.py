"""A model's prompts: the prefixes its authors embed texts with ("query: ", "passage: ", an instruction), from
sentence-transformers' config_sentence_transformers.json, carried in the manifest (`prompts`, by name, and
`default_prompt_name`).

Which prefix a request's texts get, as sentence-transformers' `encode(prompt_name=...)` chooses it:
    prompt_name given   that prompt; a name the model does not have is refused, listing the model's prompts
    input_type given    "query": the prompt named "query"; "document": the one named "document", else "passage"
                        (Cohere's and vLLM's field); a model without such a prompt embeds the text as given, so
                        a model that prompts only its queries (as many do) embeds documents bare
    neither             the model's default prompt, if it names one; else none
The prefix is prepended to the text (`inference.tokenize`), so the model reads, and `usage` counts, its tokens
too. Prompts apply to texts; token-id inputs are run as given.
"""

from __future__ import annotations

from typing import Literal

from bundle.manifest import Manifest
from inference.errors import UnknownPrompt
from inference.tokenize import TextTokenizer

InputType = Literal["query", "document"]
INPUT_TYPE_PROMPTS: dict[str, tuple[str, ...]] = {"query": ("query",), "document": ("document", "passage")}


def longest_prompt(manifest: Manifest, tokenizer: TextTokenizer) -> int:
    """Tokens of the model's longest prompt on its own: what a chunked text's windows keep room for, whichever
    prompt a request names (so one bound on `chunk_overlap` holds for every request)."""
    prompts = list(manifest.prompts.values())
    return max(len(e.ids) for e in tokenizer.content(prompts)) if prompts else 0


def prompt_text(manifest: Manifest, prompt_name: str | None = None, input_type: InputType | None = None) -> str:
    """The prefix of a request's texts ("" for none): by its prompt_name, else its input_type, else the default."""
    prompts = manifest.prompts
    if prompt_name is not None:
        if prompt_name not in prompts:
            known = ", ".join(repr(name) for name in sorted(prompts)) or "none"
            raise UnknownPrompt(f"prompt_name {prompt_name!r} is not one of this model's prompts (it has: {known})")
        return prompts[prompt_name]
    if input_type is not None:
        name = next((n for n in INPUT_TYPE_PROMPTS[input_type] if n in prompts), None)
        return prompts[name] if name is not None else ""
    return prompts[manifest.default_prompt_name] if manifest.default_prompt_name is not None else ""
