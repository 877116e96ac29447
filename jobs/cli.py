"""`attnserve embed INPUT... --bundle DIR --out OUT`: embed a corpus into Parquet, on one machine or with Ray.

Texts by default; images with --images DIR (every image file under DIR) or --image-column (a column of image bytes
or paths), embedded by an image model or a two-tower model's image tower (jobs.images), on one machine.

The model flags (provider, variant, batching, threads) are the inference core's options (`inference.options`:
LoadOptions, BatchOptions, RequestLimits), added by `attnserve.flags.add_flags` with their names, descriptions and
ATTNSERVE_* variables, so `load_bundle` picks the variant and `BatchQueue.next_batch` forms the batches with them.
Exit status: 0 done, 2 bad arguments or a job that cannot run, 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM); after 130, 143 or a kill, the same command resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from attnserve.flags import add_flags, given, report
from inference.chunking import DEFAULT_OVERLAP
from inference.errors import InferenceError
from inference.options import BatchOptions, LoadOptions, RequestLimits, from_environment
from jobs.batched import Batching
from jobs.images import FORMAT as IMAGE_FOLDER
from jobs.inputs import FORMATS, Columns, InputError
from jobs.local import JobModel
from jobs.options import Chunking, ImageInput, JobError, JobOutput

LOAD = ("provider", "variant", "allow_approximate", "intra_op_threads")
BATCH = ("max_batch_tokens", "max_batch_size", "max_queue")
LIMITS = ("max_windows_per_input", "max_image_bytes", "max_image_pixels")
JOB_HELP = {  # where the job's use of an option differs from its description in inference.options
    "max_queue": "Rows waiting to be batched at once: the job forms batches by the core's BatchQueue from a "
                 "full queue of this size (nearest lengths under the token budget); larger cuts padding, costs a "
                 "sort per batch.",
    "max_windows_per_input": "With --chunking: most windows one document may make (about tokens / (window - "
                             "overlap)); a document that makes more is a bad row, written to OUT/_rejects with "
                             "the reason.",
    "max_image_bytes": "With images: most bytes of one image (a file's size, read before the file is); a larger "
                       "image is a bad row, written to OUT/_rejects with the reason (image_too_large).",
    "max_image_pixels": "With images: most pixels (width x height) of one image, read from its header before a pixel "
                        "is decoded; a larger image is a bad row (image_too_large).",
}
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Stopped(BaseException):
    """SIGTERM arrived: stop like Ctrl-C (a BaseException, so no `except Exception` on the way swallows it)."""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("inputs", nargs="*", type=Path, metavar="INPUT",
                        help="JSONL, CSV, Parquet or plain-text files (one document a line), read in this order; "
                             "a directory stands for its files, by name (none with --images)")
    parser.add_argument("--out", type=Path, required=True, help="output directory of Parquet parts")
    parser.add_argument("--format", choices=sorted(set(FORMATS.values())),
                        help="input format (default: from each file's extension)")
    parser.add_argument("--text-column", help="column (or JSON key) holding the text (default: text)")
    parser.add_argument("--id-column", help="column (or JSON key) holding the id, written as a string "
                                            "(default: the row number, counted across the inputs from 0)")
    parser.add_argument("--classify", action="store_true",
                        help="also write the label and the scores (softmax; the sigmoid of a single label's logit)")
    parser.add_argument("--token-count", action="store_true", help="also write each row's token count")
    parser.add_argument("--sparse", action="store_true", help="also write a masked-LM (SPLADE) bundle's sparse "
                        "vector: a column of (index, value) lists, its nonzero entries in vocabulary order")
    parser.add_argument("--outputs", metavar="LIST",
                        help="a multi-vector bundle's outputs, comma separated, all from one graph run per batch: "
                             "dense (the `embedding` column), sparse (bge-m3's lexical weights: the `sparse` column "
                             "of (index, value) lists), multi (the token vectors: the `multi` column, per row a list "
                             "of fixed-size lists); default: dense, as without the flag (not with --sparse)")
    parser.add_argument("--multi-dtype", choices=("float32", "float16"), default="float32",
                        help="with --outputs multi: the token vectors' type in Parquet (float16 halves the size, "
                             "rounding each value)")
    parser.add_argument("--input-type", choices=("query", "document"), default="document",
                        help="with --outputs: read the texts as a multi-vector model's queries or documents "
                             "(ColBERT: [Q]/[D] markers, queries expanded with [MASK]s; bge-m3: the same either way)")
    parser.add_argument("--prompt-name", metavar="NAME",
                        help="put the model's prompt NAME (manifest.json prompts, GET /info) before every text, as "
                             "/embed's prompt_name does (default: the model's default prompt, when it names one)")
    parser.add_argument("--instruction", metavar="TEXT",
                        help="an instruction-following embedder's task (Qwen3-Embedding): every text is read as "
                             "'Instruct: TEXT\\nQuery:' + text, as /embed's instruction does (not with --prompt-name)")
    parser.add_argument("--task", metavar="NAME",
                        help="run the model's LoRA adapter NAME (manifest.json adapters, GET /info `adapters`) for "
                             "every text, as a request's `task` does; its prompt too when the model has one named "
                             "NAME and no --prompt-name or --instruction is given (default: the base model)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=True,
                        help="L2-normalise the vectors, as /embed does by default")
    parser.add_argument("--part-rows", type=int, default=10_000,
                        help="input rows per output part: the unit of progress kept after a kill")
    parser.add_argument("--overwrite", action="store_true", help="start afresh instead of resuming")
    _image_flags(parser.add_argument_group("images (an image model, or a two-tower model's image tower; one machine)"))
    _chunking_flags(parser.add_argument_group("long documents (default: truncated to the model's max length)"))
    _model_flags(parser.add_argument_group("model (the inference core's options)"))
    _ray_flags(parser.add_argument_group("Ray"))
    return parser


def _model_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--bundle", type=Path, default=None, help="Bundle directory (manifest.json, tokenizer.json, "
                       "*.onnx) made by `attnserve export`; one bundle. [env ATTNSERVE_BUNDLE]")
    add_flags(group, LoadOptions, LOAD, JOB_HELP)
    add_flags(group, BatchOptions, BATCH, JOB_HELP)
    add_flags(group, RequestLimits, LIMITS, JOB_HELP)


def _image_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--images", type=Path, metavar="DIR",
                       help="embed every PNG, JPEG, WebP and GIF file under DIR, at any depth (names starting with "
                            "'.' skipped), in sorted path order; the id is the file's path under DIR (no INPUT)")
    group.add_argument("--image-column", metavar="NAME",
                       help="the INPUT files' rows are images: column (or JSON key) NAME holds each image's bytes "
                            "(a Parquet binary column) or its path (a string); the id as for texts")
    group.add_argument("--image-root", type=Path, metavar="DIR",
                       help="with --image-column: where the paths are read from (default: the current directory)")


def _chunking_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--chunking", choices=("mean", "windows"),
                       help="cut each document into windows of the model's max length less its special tokens, as "
                            "/embed's chunking does; mean: one row per document, its windows' vectors (or logits) "
                            "averaged, weighted by content tokens; windows: one row per window, with its index, "
                            "character span and content tokens")
    group.add_argument("--chunk-overlap", type=int, metavar="N",
                       help=f"tokens shared by neighbouring windows, 0 <= N < the window (default: what /embed takes "
                            f"when a request names none, {DEFAULT_OVERLAP}, or half the window when that does not "
                            "fit)")


def _ray_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                       help="run on Ray Data; without ADDRESS a local Ray instance is started "
                            "(ADDRESS: auto, host:port or ray://host:10001); needs the ray extra")
    group.add_argument("--ray-actors", type=int, help="engine actors (default: the cluster's CPUs, less one for "
                                                      "reading, divided by --ray-cpus-per-actor; GPUs with cuda)")
    group.add_argument("--ray-cpus-per-actor", type=int, default=1,
                       help="CPUs each actor reserves; its onnxruntime session uses as many threads")
    group.add_argument("--ray-batch-rows", type=int, default=1024, help="rows handed to an actor at a time")


def main(argv: list[str], prog: str = "attnserve embed") -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        model, limits = _model(args)
    except ValidationError as error:
        return report(prog, error)
    try:
        with _sigterm_stops():
            print((_run_ray if args.ray else _run_local)(args, model, limits).line())
    except (JobError, InputError, InferenceError) as error:  # InferenceError: what the model cannot do (an image
        print(f"{prog}: {error}", file=sys.stderr)  # model sent texts)
        return 2
    except (KeyboardInterrupt, Stopped) as stop:
        signum = signal.SIGTERM if isinstance(stop, Stopped) else signal.SIGINT
        print(f"\n{prog}: stopped by {signum.name}; run the same command again to resume", file=sys.stderr)
        return EXIT_STATUS[signum]
    return 0


class _Bundle(BaseModel):
    bundle: Path = Field(description="the bundle directory: --bundle, or ATTNSERVE_BUNDLE")


def _model(args: argparse.Namespace) -> tuple[JobModel, RequestLimits]:
    """The bundle and the core's options from the flags, then the ATTNSERVE_* variables (ValidationError names
    a bad one); and the caps on the rows (windows, images)."""
    bundle = from_environment(_Bundle, **given(args, ("bundle",))).bundle
    load = from_environment(LoadOptions, **given(args, LOAD))
    batch = from_environment(BatchOptions, **given(args, BATCH))
    limits = from_environment(RequestLimits, **given(args, LIMITS))
    return JobModel(bundle, load, Batching.of(batch)), limits


def _run_local(args: argparse.Namespace, model: JobModel, limits: RequestLimits):
    from jobs.local import run

    return run(_job(args, limits), model)


def _run_ray(args: argparse.Namespace, model: JobModel, limits: RequestLimits):
    from jobs.ray import RayOptions, run_on_ray

    options = RayOptions(args.ray, args.ray_actors, args.ray_cpus_per_actor, args.ray_batch_rows)
    return run_on_ray(_job(args, limits), model, options)


def _job(args: argparse.Namespace, limits: RequestLimits):
    from jobs.local import Job

    if args.part_rows < 1:
        raise JobError("--part-rows must be at least 1")
    inputs, fmt, column = _rows(args)
    return Job(inputs, args.out, fmt, Columns(column, args.id_column),
               JobOutput(args.normalize, args.classify, args.token_count, _chunking(args, limits.max_windows_per_input),
                         args.sparse, args.prompt_name, args.instruction, args.task, _outputs(args),
                         args.multi_dtype, args.input_type),
               args.part_rows, args.overwrite, _images(args, limits))


def _rows(args: argparse.Namespace) -> tuple[tuple[Path, ...], str | None, str]:
    """The inputs, their format and the column the rows are read from: --images DIR, or INPUT files of texts or
    (--image-column) images; JobError for flags that do not go together."""
    images = args.image_column is not None or args.images is not None
    if images and args.text_column is not None:
        raise JobError("--text-column is for texts; images are read from --images DIR or --image-column")
    if args.image_root is not None and args.image_column is None:
        raise JobError("--image-root goes with --image-column (a column of paths)")
    if args.images is None:
        if not args.inputs:
            raise JobError("give INPUT files (texts, or images with --image-column) or --images DIR")
        return tuple(args.inputs), args.format, args.image_column or args.text_column or "text"
    given = [flag for flag, value in (("INPUT", args.inputs), ("--image-column", args.image_column),
                                      ("--id-column", args.id_column), ("--format", args.format)) if value]
    if given:
        raise JobError(f"--images DIR reads the image files under DIR, each its path as its id: not with "
                       f"{', '.join(given)}")
    return (args.images,), IMAGE_FOLDER, "text"


def _images(args: argparse.Namespace, limits: RequestLimits) -> ImageInput | None:
    if args.images is None and args.image_column is None:
        return None
    return ImageInput.of(limits, args.image_root)


def _outputs(args: argparse.Namespace) -> tuple[str, ...] | None:
    from jobs.multivector import parse_outputs

    return None if args.outputs is None else parse_outputs(args.outputs)


def _chunking(args: argparse.Namespace, max_windows: int) -> Chunking | None:
    if args.chunking is None:
        if args.chunk_overlap is not None:
            raise JobError("--chunk-overlap needs --chunking mean or windows")
        return None
    if args.instruction is not None:  # as /embed refuses an instruction with chunking: the same vectors or none
        raise JobError("--instruction cannot be given with --chunking")
    return Chunking(args.chunking, args.chunk_overlap, max_windows)  # None: the bundle's own (jobs.windows.resolve)


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM raises Stopped while the job runs; the caller's handler is back when it ends, so a process that
    calls main (a test run, a notebook) does not keep a handler that raises Stopped wherever a later SIGTERM lands."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:  # None: a handler not set from Python, which cannot be put back; the default is the nearest
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _stop(signum: int, frame: object) -> None:
    raise Stopped(signal.Signals(signum).name)
