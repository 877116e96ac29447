"""`attnserve embed` on one machine: a corpus in, numbered Parquet parts out, resumable.

The bundle is loaded by `inference.runtime.loading.load_bundle` (verified, provider and variant chosen by its
policy, sessions opened with `LoadOptions`), with the fast graph only. The input is read as one row stream in bounded
chunks and cut into parts of `part_rows` input rows; each part's good rows are embedded by the core's
functions (jobs.embedding; with --chunking, window by window: jobs.windows), written atomically, then recorded
in `_job.json` (jobs.parts). Images (`Job.images`: --images DIR or --image-column) take the same path,
embedded by jobs.images with the image model (a two-tower bundle's image tower). Memory holds one part at a
time, whatever the size of the corpus. A re-run with the same arguments skips the recorded parts' rows and
goes on; its output equals an uninterrupted run's, part for part.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa

from inference.errors import StartupError
from inference.options import BatchOptions, LoadOptions
from inference.runtime.loading import LoadedBundle, load_bundle
from jobs import embedding, images, inputs, multivector, parts, tables, windows
from jobs.batched import Batching
from jobs.inputs import Chunk, Columns, Source
from jobs.options import ImageInput, JobError, JobOutput, prompt_of, recorded
from jobs.progress import Progress

READ_ROWS = 4096  # rows read from an input at a time


@dataclass(frozen=True)
class Job:
    inputs: tuple[Path, ...]
    out: Path
    format: str | None = None  # None: from each file's extension
    columns: Columns = field(default_factory=Columns)
    output: JobOutput = field(default_factory=JobOutput)
    part_rows: int = 10_000
    overwrite: bool = False
    images: ImageInput | None = None  # the rows are images (--images DIR, format "images"; --image-column); None: texts


@dataclass(frozen=True)
class Summary:
    rows: int
    written: int
    rejected: int
    tokens: int  # -1: not counted (a Ray run without --token-count)
    seconds: float
    parts: int
    out: str
    cpu_seconds: float = 0.0  # the local job's CPU time for the parts (all threads); 0 for a Ray run

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        tokens = f"{self.tokens:,} tokens" if self.tokens >= 0 else "tokens not counted"
        return (f"{self.rows:,} rows ({self.written:,} written, {self.rejected:,} rejected) in {self.parts} parts, "
                f"{tokens}, {self.seconds:.1f} s, {rate:,.0f} rows/s -> {self.out}")


@dataclass(frozen=True)
class JobModel:
    """The bundle a job embeds with, how it is opened, and how its rows are batched."""

    bundle: Path
    load: LoadOptions = field(default_factory=LoadOptions)
    batching: Batching = field(default_factory=lambda: Batching.of(BatchOptions()))


def open_bundle(model: JobModel, output: JobOutput, image_input: ImageInput | None = None) -> LoadedBundle:
    """The bundle with its fast graph only (the job embeds: no attention session), checked for what the
    output asks of it, of texts or (`image_input`) of images."""
    try:
        bundle = load_bundle(model.bundle, model.load, kinds=("fast",))
    except StartupError as error:
        raise JobError(f"cannot load the bundle: {error.message}") from None
    if image_input is not None:
        images.check(bundle, output)
        return bundle
    if bundle.text_tokenizer is None:
        raise JobError(f"{bundle.manifest.name} is an image model: it embeds images, not texts (give --images DIR, "
                       "or --image-column COLUMN: docs/jobs.md)")
    if output.classify and not bundle.manifest.labels:
        raise JobError("--classify: this model has no classification head (manifest.json labels is empty)")
    multivector.check(bundle.manifest, output)  # first: --sparse with --outputs is refused as such
    check_sparse(bundle.manifest.task, output)
    prompt = prompt_of(bundle.manifest, output)  # a prompt name the model lacks stops the job here
    output = windows.resolve(output, bundle.tokenizer, bundle.manifest)
    if output.chunking is not None:
        windows.check(bundle.tokenizer, output.chunking, prompt)
    return bundle


def check_sparse(task: str, output: JobOutput) -> None:
    """--sparse needs a masked-LM bundle, and rows of whole documents (not with --chunking)."""
    if output.sparse and task != "sparse":
        raise JobError(f"--sparse: this bundle's task is {task!r}, not a masked-LM (SPLADE) bundle's 'sparse'")
    if output.sparse and output.chunking is not None:
        raise JobError("--sparse does not go with --chunking: sparse vectors are written per document")


def output_schema(bundle: LoadedBundle, job: Job) -> pa.Schema:
    """The parts' schema; the fingerprint is the bundle's (a two-tower model's images and texts share it, as the
    server's x-model-fingerprint does), the width and labels the model's that embeds the rows."""
    m = (images.tower(bundle) if job.images is not None else bundle).manifest
    named = job.columns.id is not None or job.format == images.FORMAT  # a file's path is its id
    return tables.schema(tables.id_type(named), m.embedding_size, list(m.labels),
                         job.output, bundle.fingerprint, m.multi_vector.size if m.multi_vector else 0)


def run(job: Job, model: JobModel, stream: TextIO = sys.stderr) -> Summary:
    bundle = open_bundle(model, job.output, job.images)
    if job.images is None:
        job = replace(job, output=windows.resolve(job.output, bundle.tokenizer, bundle.manifest))  # recorded resolved
    sources = plan(job)
    state = parts.prepare(job.out, job_args(job, sources, bundle, model), job.overwrite)
    skip = len(state.parts) * job.part_rows
    total = None if any(s.rows is None for s in sources) else sum(s.rows or 0 for s in sources)
    stream.write(_header(bundle, total, len(sources), state))
    progress = Progress(stream, total, min(skip, total) if total is not None else skip)
    pa.array([0])  # pyarrow imports pandas (where installed) at its first list conversion: start-up, paid here
    try:
        if not state.done:
            chunks = read(job, sources, min(READ_ROWS, job.part_rows), skip)
            started = _clocks()  # a part's seconds: reading, embedding and writing it, start-up aside
            for index, part in enumerate(in_parts(chunks, job.part_rows), start=len(state.parts)):
                state.parts.append(run_part(bundle, job, index, part, model.batching, progress, started))
                state.save(job.out)
                started = _clocks()
            state.done = True
            state.save(job.out)
    finally:
        progress.close()
    return summary(state, job.out)


def plan(job: Job) -> list[Source]:
    """The job's inputs: --images DIR as one source of its image files, or files of rows."""
    if job.format != images.FORMAT:
        return inputs.plan(list(job.inputs), job.format, job.columns)
    if job.images is None or len(job.inputs) != 1:
        raise JobError("--images reads one directory of images")
    return [images.folder_source(job.inputs[0])]


def read(job: Job, sources: list[Source], chunk_rows: int, skip: int) -> Iterator[Chunk]:
    if job.format == images.FORMAT:
        return images.read_folder(sources[0].path, chunk_rows, skip)
    return inputs.read(sources, job.columns, chunk_rows, skip)


def run_part(bundle: LoadedBundle, job: Job, index: int, part: Chunk, batching: Batching, progress: Progress,
             started: tuple[float, float]) -> parts.PartRecord:
    if job.images is not None:
        embedder = images.tower(bundle)
        good, rejects, values = images.embed_part(embedder, part, job.output, batching, job.images, progress.advance)
    else:
        embedder = bundle
        good, rejects, values = _embed_texts(bundle, job.output, part, batching, progress)
    labels = list(embedder.manifest.labels)
    table = tables.table([part.ids[i] for i in good], values, labels, output_schema(bundle, job))
    parts.write_part(job.out, index, table, rejects)
    wall, cpu = (now - then for now, then in zip(_clocks(), started, strict=True))
    return parts.PartRecord(len(part), len(good), len(rejects), int(values["tokens"].sum()), round(wall, 3),
                            round(cpu, 3))


def _embed_texts(bundle: LoadedBundle, output: JobOutput, part: Chunk, batching: Batching,
                 progress: Progress) -> tuple[list[int], list[dict[str, Any]], dict[str, Any]]:
    """The part's good rows, its rejects and the good rows' values (jobs.embedding, jobs.windows)."""
    prompt = prompt_of(bundle.manifest, output)
    good, rejects = embedding.split(part, windows.too_long(bundle.tokenizer, output, prompt))
    progress.advance(len(rejects))
    return good, rejects, windows.embed(bundle, [part.texts[i] for i in good], output, batching, progress.advance)


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _header(bundle: LoadedBundle, total: int | None, files: int, state: parts.JobState) -> str:
    m, rows_ = bundle.manifest, f"{total:,}" if total is not None else "?"
    resuming = f"; resuming after {len(state.parts)} parts" if state.parts else ""
    resuming = "; already complete" if state.done else resuming
    return f"{m.name} {m.version}, variant {bundle.variants['fast']} on {bundle.provider}: " \
           f"{rows_} rows in {files} inputs{resuming}\n"


def summary(state: parts.JobState, out: Path) -> Summary:
    t = state.totals()
    return Summary(t.rows, t.written, t.rejected, t.tokens, t.seconds, len(state.parts), str(out), t.cpu_seconds)


def in_parts(chunks: Iterator[Chunk], size: int) -> Iterator[Chunk]:
    """Regroup a row stream into parts of exactly `size` rows (the last may be shorter)."""
    pending: list[Chunk] = []
    count = 0
    for chunk in chunks:
        rest: Chunk | None = chunk
        while rest is not None:
            head, rest = _cut(rest, size - count)
            pending.append(head)
            count += len(head)
            if count == size:
                yield _join(pending)
                pending, count = [], 0
    if count:
        yield _join(pending)


def job_args(job: Job, sources: list[Source], bundle: LoadedBundle, model: JobModel) -> dict[str, Any]:
    """What decides the output, as recorded in _job.json: a re-run resumes only when all of it is unchanged."""
    m = bundle.manifest
    graph = m.graph("fast", bundle.variants["fast"])
    args = {
        "inputs": [_identity(s) for s in sources], "formats": [s.format for s in sources],
        "text_column": job.columns.text, "id_column": job.columns.id, "output": recorded(job.output),
        "part_rows": job.part_rows, "batching": asdict(model.batching),
        "model": f"{m.name} {m.version}", "provider": bundle.provider, "variant": bundle.variants["fast"],
        "graph_sha256": graph.content_sha256 if graph else None, "tokenizer_sha256": m.tokenizer_sha256,
    }
    return args | (_image_args(bundle, job.images) if job.images is not None else {"prompt": prompt_of(m, job.output)})


def _image_args(bundle: LoadedBundle, image_input: ImageInput) -> dict[str, Any]:
    """An image job's record besides the rest: its caps and root, the image model's graph and preprocessing."""
    image = images.tower(bundle)
    graph = image.manifest.graph("fast", image.variants["fast"])
    return {"images": image_input.recorded(), "image_graph_sha256": graph.content_sha256 if graph else None,
            "preprocessor_sha256": image.manifest.input_file[1]}


def _identity(source: Source) -> dict[str, Any]:
    if source.format == images.FORMAT:
        return images.identity(source.path)
    path = source.path
    if not inputs.is_file(path):
        return {"path": str(path)}  # a pipe: a re-run must feed the same rows
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _cut(chunk: Chunk, n: int) -> tuple[Chunk, Chunk | None]:
    if len(chunk) <= n:
        return chunk, None
    head = Chunk(chunk.start, chunk.ids[:n], chunk.texts[:n])
    return head, Chunk(chunk.start + n, chunk.ids[n:], chunk.texts[n:])


def _join(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return Chunk(chunks[0].start, [i for c in chunks for i in c.ids], [t for c in chunks for t in c.texts])
