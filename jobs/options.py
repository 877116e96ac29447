"""What a job is asked for, from its flags: the output rows (`JobOutput`, with --chunking's `Chunking`), and the
request rules they resolve against the bundle: the prompt (`inference.prompts.prompt_text`) and the LoRA adapter
(`inference.rules.adapter_index`), each the core's rule with the job's flag names in its errors.

Every module of jobs/ imports this one and it imports none of them, so jobs/ has no import cycle
(tests/jobs/test_imports.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bundle.manifest import Manifest
from inference import rules
from inference.chunking import Mode
from inference.errors import NoInstruction, UnknownAdapter, UnknownPrompt
from inference.options import RequestLimits
from inference.prompts import prompt_text

OnBatch = Callable[[int], None]  # told how many rows each batch finished (progress)
TooLong = Callable[[list[str]], list[str | None]]  # per text, why it is set aside (None: it is not)


class JobError(Exception):
    """The job cannot go on (a model fault, an output it cannot write); the message says why."""


@dataclass(frozen=True)
class Chunking:
    """--chunking: long texts cut into inference.chunking's windows instead of truncated."""

    mode: Mode  # mean: one pooled row per document; windows: one row per window
    overlap: int | None  # tokens shared by neighbouring windows; None: `inference.rules.text_overlap`'s default
    max_windows: int  # a document that makes more windows is a bad row

    @property
    def shared(self) -> int:
        """The overlap, once jobs.windows.resolve has given it (the job's windows are cut only after)."""
        if self.overlap is None:
            raise JobError("the chunk overlap was not resolved against the bundle (jobs.windows.resolve)")
        return self.overlap


@dataclass(frozen=True)
class JobOutput:
    """What the output rows are (one per document, or one per window) and hold besides id and embedding."""

    normalize: bool = True
    classify: bool = False
    token_count: bool = False
    chunking: Chunking | None = None  # None: truncate (`TextTokenizer.encode_ids`, from the right)
    sparse: bool = False  # a masked-LM bundle's SPLADE vector too: a column of (index, value) lists
    prompt_name: str | None = None  # the model's prompt put before every text; None: `prompt_text`'s choice
    instruction: str | None = None  # an instruction-following embedder's task, as /embed's `instruction`
    task: str | None = None  # the model's LoRA adapter every row runs with, as a request's `task`; None: the base
    outputs: tuple[str, ...] | None = None  # --outputs of a multi-vector bundle (jobs.multivector); None: dense as ever
    multi_dtype: str = "float32"  # the token vectors' type in Parquet: float32 or float16
    input_type: str = "document"  # a multi-vector model's texts read as queries or documents


@dataclass(frozen=True)
class ImageInput:
    """The rows are images (jobs.images), each checked by the server's caps (`RequestLimits.max_image_bytes`,
    `max_image_pixels`) before it is decoded; an image over them is a bad row."""

    max_bytes: int = RequestLimits.model_fields["max_image_bytes"].default
    max_pixels: int = RequestLimits.model_fields["max_image_pixels"].default
    root: Path | None = None  # where a value that is a path (a string) is read from; None: the current directory

    @classmethod
    def of(cls, limits: RequestLimits, root: Path | None = None) -> ImageInput:
        return cls(limits.max_image_bytes, limits.max_image_pixels, root)

    def recorded(self) -> dict[str, Any]:
        """As _job.json records it: the caps decide which rows are rejected, the root which files are read."""
        return {"max_bytes": self.max_bytes, "max_pixels": self.max_pixels,
                "root": None if self.root is None else str(self.root.resolve())}


# Fields a job's record (_job.json) leaves out at their defaults, so a job begun before they existed still resumes
LATER_FIELDS = ("outputs", "multi_dtype", "input_type")


def recorded(output: JobOutput) -> dict[str, Any]:
    """The output's fields as _job.json records them: every field, less those of LATER_FIELDS at their defaults."""
    defaults = JobOutput()
    return {name: value for name, value in dataclasses.asdict(output).items()
            if name not in LATER_FIELDS or value != getattr(defaults, name)}


def adapter_of(manifest: Manifest, output: JobOutput) -> int:
    """The adapter index every graph run feeds for --task (`inference.rules.adapter_index`, a request's `task`
    rule); JobError for a task the model does not have, or any task when it has no adapters."""
    try:
        return rules.adapter_index(manifest, output.task, manifest.name)
    except UnknownAdapter as error:
        raise JobError("--task: " + error.message.replace("leave `task` out", "leave --task out")) from None


def prompt_of(manifest: Manifest, output: JobOutput) -> str:
    """The prefix of every text (`inference.prompts.prompt_text`: --instruction, else --prompt-name, else the
    prompt named like --task, else the model's default prompt); JobError for a name the model does not have, an
    instruction it does not take or a task it does not have."""
    adapter_of(manifest, output)
    try:
        return prompt_text(manifest, output.prompt_name, instruction=output.instruction, adapter=output.task)
    except UnknownPrompt as error:
        raise JobError(f"--prompt-name: {error.message}") from None
    except NoInstruction as error:
        raise JobError(f"--instruction: {error.message}") from None
