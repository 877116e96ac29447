"""Domain errors of the inference core. The HTTP front maps each to a status (`service.errors`); nothing here
knows about HTTP.

    InferenceError               (base; never raised bare)
    ├── InvalidRequest           bad or unusable input
    │   ├── InputTooLong         an input exceeds max characters or max tokens (truncate=false)
    │   ├── TooManyInputs        more inputs than max_inputs (or than the queue holds)
    │   ├── AttentionTooLarge    an attention answer would exceed attention_cap_bytes
    │   ├── ResponseTooLarge     a per-token answer would exceed embed_all_cap_bytes
    │   ├── OutOfRange           a value past a size of the loaded model (layer, head, token id, dimensions)
    │   ├── Unsupported          the model cannot do it (no labels, no attention graph, no such output)
    │   ├── UnknownPrompt        a prompt name the model does not have (the message lists its prompts)
    │   ├── UnknownAdapter       a LoRA adapter (`task` on the wire, code unknown_task) the model does not have, or
    │   │                        any for a model without adapters (no_tasks), or two that disagree (task_conflict)
    │   ├── NoInstruction        an instruction for a model without an instruction prompt, or with another prompt
    │   └── InvalidImage         image bytes that do not decode (invalid_image), a format other than PNG, JPEG,
    │                            WebP or GIF (unsupported_image_format), or more pixels than the cap (image_too_large)
    ├── ModelNotFound            no served model has the requested name (the message lists them)
    ├── Overloaded               admission full; carries how long to wait before retrying
    ├── NotReady                 not warm, the last inference failed, or shutting down
    ├── QueueTimeout             waited past queue_timeout_s; not run
    ├── InferenceFailed          a batch failed; every request in it gets this
    │   └── NonFiniteOutput      the graph returned NaN or Inf for an input; never answered as numbers
    └── StartupError             a bundle cannot be loaded or served (raised before serving, never per request)
"""

from __future__ import annotations


class InferenceError(Exception):
    """A failure the caller can be told about; `code` names it in an answer."""

    code: str = "internal_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidRequest(InferenceError):
    code = "invalid_request"


class InputTooLong(InvalidRequest):
    code = "input_too_long"


class TooManyInputs(InvalidRequest):
    code = "too_many_inputs"


class AttentionTooLarge(InvalidRequest):
    code = "attention_too_large"


class ResponseTooLarge(InvalidRequest):
    code = "response_too_large"


class OutOfRange(InvalidRequest):
    """Well-formed, but past a size of the loaded model."""

    code = "out_of_range"


class Unsupported(InvalidRequest):
    code = "unsupported"


class UnknownPrompt(InvalidRequest):
    code = "unknown_prompt"


class UnknownAdapter(InvalidRequest):
    code = "unknown_task"


class NoInstruction(InvalidRequest):
    code = "instruction_not_taken"


class InvalidImage(InvalidRequest):
    """An image the core will not read (inference/runtime/images.py); `code` says why."""

    code = "invalid_image"


class ModelNotFound(InferenceError):
    code = "model_not_found"


class Overloaded(InferenceError):
    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class NotReady(InferenceError):
    code = "not_ready"


class QueueTimeout(InferenceError):
    code = "queue_timeout"


class InferenceFailed(InferenceError):
    code = "inference_failed"


class NonFiniteOutput(InferenceFailed):
    code = "non_finite_output"


class StartupError(InferenceError):
    """A bundle cannot be served: the message names the file or setting at fault."""

    code = "startup_error"
