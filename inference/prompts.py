"""A model's prompts: the prefixes its authors embed texts with ("query: ", "passage: ", an instruction), from
sentence-transformers' config_sentence_transformers.json, carried in the manifest (`prompts`, by name, and
`default_prompt_name`).

Which prefix a request's texts get, as sentence-transformers' `encode(prompt_name=...)` chooses it (a request
that gives both prompt_name and input_type is refused: each chooses the prompt):
    prompt_name given   that prompt; a name the model does not have is refused, listing the model's prompts
    input_type given    "query": the prompt named "query"; "document": the one named "document", else "passage"
                        (Cohere's and vLLM's field); a model without such a prompt embeds the text as given, so
                        a model that prompts only its queries (as many do) embeds documents bare
    adapter             a request run with a LoRA adapter (its `task` on the wire) that names neither: the prompt
                        named like the adapter, if the model has one (jina-embeddings-v3's
                        `encode(task=t, prompt_name=t)`)
    neither             the model's default prompt, if it names one; else none
    instruction given   Qwen3-Embedding's (and e5-mistral's, gte-Qwen2's) format with the request's task,
                        `Instruct: {task}\nQuery:` in the spacing of the model's own instruction prompt (the
                        prompt written that way, its "query" first); with input_type "query" or alone. A model
                        with no such prompt, or an instruction together with a prompt_name or input_type
                        "document", is refused (NoInstruction)
The prefix is prepended to the text (`inference.runtime.tokenize`), so the model reads, and `usage` counts, its tokens
too. Prompts apply to texts; token-id inputs are run as given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from bundle.manifest import Manifest
from inference.errors import InvalidRequest, NoInstruction, UnknownPrompt
from inference.runtime.tokenize import TextTokenizer

InputType = Literal["query", "document", "classification", "clustering"]
# the prompt names each input type takes, first found wins (none found: the text as given); classification and
# clustering are Cohere's, named as EmbeddingGemma's prompts are
INPUT_TYPE_PROMPTS: dict[str, tuple[str, ...]] = {
    "query": ("query",), "document": ("document", "passage"), "classification": ("classification", "Classification"),
    "clustering": ("clustering", "Clustering")}


def longest_prompt(manifest: Manifest, tokenizer: TextTokenizer) -> int:
    """Tokens of the model's longest prompt on its own: what a chunked text's windows keep room for, whichever
    prompt a request names (so one bound on `chunk_overlap` holds for every request)."""
    prompts = list(manifest.prompts.values())
    return max(len(e.ids) for e in tokenizer.content(prompts)) if prompts else 0


INSTRUCTION = re.compile(r"Instruct: (?P<task>.+)\nQuery:(?P<space> ?)", re.DOTALL)


@dataclass(frozen=True)
class Instruction:
    """How a model takes a task: `template` with {instruction}, and the task of its own prompt."""

    template: str
    default: str


def instruction_of(prompts: dict[str, str]) -> Instruction | None:
    """The model's instruction format, from its prompt written `Instruct: <task>\nQuery:` ("query" first)."""
    for name in ("query", *sorted(prompts)):
        found = INSTRUCTION.fullmatch(prompts.get(name, ""))
        if found:
            return Instruction(f"Instruct: {{instruction}}\nQuery:{found['space']}", found["task"])
    return None


def instruction_info(prompts: dict[str, str]) -> dict[str, str] | None:
    """What /info and /v1/models say of a model's instruction: {"template", "default"}, or None."""
    found = instruction_of(prompts)
    return {"template": found.template, "default": found.default} if found is not None else None


def prompt_text(manifest: Manifest, prompt_name: str | None = None, input_type: InputType | None = None,
                instruction: str | None = None, adapter: str | None = None) -> str:
    """The prefix of a request's texts ("" for none): by its instruction, else its prompt_name, else its
    input_type, else the prompt named like the LoRA adapter it runs with (its `task` on the wire), else the
    default."""
    prompts = manifest.prompts
    if prompt_name is not None and input_type is not None:
        raise InvalidRequest("prompt_name and input_type each choose the prompt: give one of them",
                             code="prompt_conflict")
    if instruction is not None:
        return _instructed(prompts, instruction, prompt_name, input_type)
    if prompt_name is not None:
        if prompt_name not in prompts:
            known = ", ".join(repr(name) for name in sorted(prompts)) or "none"
            raise UnknownPrompt(f"prompt_name {prompt_name!r} is not one of this model's prompts (it has: {known})")
        return prompts[prompt_name]
    if input_type is not None:
        name = next((n for n in INPUT_TYPE_PROMPTS[input_type] if n in prompts), None)
        return prompts[name] if name is not None else ""
    if adapter is not None and adapter in prompts:
        return prompts[adapter]
    return prompts[manifest.default_prompt_name] if manifest.default_prompt_name is not None else ""


def _instructed(prompts: dict[str, str], instruction: str, prompt_name: str | None,
                input_type: InputType | None) -> str:
    if prompt_name is not None or input_type == "document":
        raise NoInstruction("instruction makes the query prompt; it cannot be given with prompt_name or input_type "
                            "document (leave those out, or send input_type query)")
    found = instruction_of(prompts)
    if found is None:
        raise NoInstruction("this model takes no instruction: none of its prompts is written "
                            "'Instruct: <task>\\nQuery:' (GET /info lists each model's prompts)")
    return found.template.replace("{instruction}", instruction)
