"""`attnserve embed ... --ray [ADDRESS]`: the same job on Ray Data, for a corpus bigger than one machine.

    from_items(the input files, each with its first row number)      planned on the driver
    -> map_batches(read_file)          the local job's reader and bad-row checks (with --chunking, the window
                                       cap too), one task per file, blocks of --ray-batch-rows rows; bad rows
                                       go to OUT/_rejects/input-NNNNN.jsonl
    -> map_batches(Embedder, actor pool)  one onnxruntime session per actor (threads = the actor's CPUs,
                                       num_gpus with provider cuda); the local job's jobs.embedding / jobs.windows
                                       code, so with --chunking a document's windows stay in one actor call
    -> write_parquet(OUT)

Files are read with the local job's reader, not Ray's `read_json`/`read_csv`/`read_text`: those cannot
number rows (the id when there is no id column), and Arrow's JSON reader fails a whole file on one row
whose text is not a string, where the job rejects that row alone. So ids, rejects and vectors are the
local job's; only the row order differs (Ray does not keep it: sort by id). A Ray run does not resume:
Ray retries failed tasks itself; an interrupted run starts afresh with --overwrite.

Paths (inputs, bundle, OUT) must be the same on every node: a shared volume, or one machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bundle.files import written_whole
from inference.errors import StartupError
from inference.runtime.loading import verify
from inference.runtime.tokenize import load_tokenizer
from jobs import embedding, inputs, multivector, parts, tables, windows
from jobs.local import Job, JobModel, Summary, check_sparse, open_bundle
from jobs.options import JobError, JobOutput, TooLong, prompt_of, recorded

# A read task's CPU share. Not an actor's (whole CPUs), so Ray does not fuse reading into the actors: fused, each
# file would be read and embedded by one actor, and a single big file would leave the rest of the pool idle.
READ_CPUS = 0.5


@dataclass(frozen=True)
class RayOptions:
    address: str  # "local" starts a local instance; else what ray.init(address=...) takes
    actors: int | None = None  # None: from the cluster's resources
    cpus_per_actor: int = 1
    batch_rows: int = 1024


def pool_arguments(version: str, actors: int, strategy: Callable[..., Any]) -> dict[str, Any]:
    """map_batches' keyword for a fixed pool of `actors` actors in this Ray version: `concurrency=n` from
    2.9 (which replaced `compute=ActorPoolStrategy(...)`), `compute=` again from 2.51 (which deprecated
    `concurrency`). `strategy` is ray.data.ActorPoolStrategy."""
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    if (2, 9) <= major_minor < (2, 51):
        return {"concurrency": actors}
    return {"compute": strategy(min_size=actors, max_size=actors)}


def actor_resources(provider: str, options: RayOptions, cluster: dict[str, float]) -> dict[str, Any]:
    """num_cpus, num_gpus and the pool size: one GPU per actor with provider cuda (asked for explicitly: the
    driver cannot tell what `auto` finds on the workers); one CPU kept for the read tasks."""
    gpus = 1 if provider == "cuda" else 0
    if options.actors is not None:
        actors = options.actors
    elif gpus:
        actors = int(cluster.get("GPU", 0))
    else:
        actors = int((cluster.get("CPU", 1) - 1) // options.cpus_per_actor)
    if actors < 1:
        raise JobError(f"the Ray cluster ({cluster}) has no room for an engine actor; set --ray-actors")
    return {"num_cpus": options.cpus_per_actor, "num_gpus": gpus, "actors": actors}


class Embedder:
    """A Ray actor: the bundle, loaded once with `threads` intra-op threads, embedding one batch of good rows per
    call."""

    def __init__(self, model: JobModel, output: JobOutput, has_id_column: bool, threads: int) -> None:
        load = model.load.model_copy(update={"intra_op_threads": threads})
        self.batching, self.output = model.batching, output
        self.bundle = open_bundle(JobModel(model.bundle, load, model.batching), output)
        m = self.bundle.manifest
        self.schema = tables.schema(tables.id_type(has_id_column), m.embedding_size, list(m.labels), output,
                                    self.bundle.fingerprint, m.multi_vector.size if m.multi_vector else 0)

    def __call__(self, batch: pa.Table) -> pa.Table:
        values = windows.embed(self.bundle, batch.column("text").to_pylist(), self.output, self.batching)
        return tables.table(batch.column("id").to_pylist(), values, list(self.bundle.manifest.labels), self.schema)


def read_file(batch: pa.Table, columns: inputs.Columns, out: str, chunk_rows: int,
              too_long: TooLong | None = None) -> Iterator[pa.Table]:
    """A Ray task: one input file's good rows as (id, text) blocks of at most `chunk_rows` rows, which Ray
    spreads over the actor pool; its bad rows (`too_long`'s too) into _rejects (atomically)."""
    item = batch.to_pylist()[0]
    source = inputs.Source(Path(item["path"]), item["format"], item["rows"])
    id_type = tables.id_type(columns.id is not None)
    with _rejects_file(Path(out), item["index"]) as rejects:
        for chunk in inputs.read_source(source, columns, chunk_rows, 0, item["first_row"]):
            good, bad = embedding.split(chunk, too_long)
            rejects.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in bad)
            yield pa.table({"id": pa.array([chunk.ids[i] for i in good], type=id_type),
                            "text": pa.array([chunk.texts[i] for i in good], type=pa.string())})


def run_on_ray(job: Job, model: JobModel, options: RayOptions) -> Summary:
    if job.images is not None:
        raise JobError("--ray embeds texts; a job over images (--images, --image-column) runs on one machine")
    import ray

    sources = inputs.plan(list(job.inputs), job.format, job.columns)
    if any(s.rows is None for s in sources):
        raise JobError("--ray reads regular files only (a pipe cannot be planned or read by several workers)")
    output, too_long = _check_bundle(model, job.output)  # the actors choose the variant: the driver may have no GPU
    job = replace(job, output=output)
    args = {"runner": "ray", **_args(job, sources, model)}
    state = _prepare(job.out, args, job.overwrite)
    if state.done:
        return _summary(job.out, state.parts[0].seconds, job.output)
    already_connected = ray.is_initialized()  # a caller's Ray (a test, a notebook) is used and left running
    if not already_connected:
        ray.init(address=options.address, include_dashboard=False if options.address == "local" else None)
    try:
        seconds = _execute(job, model, options, sources, too_long)
    finally:
        if not already_connected:
            ray.shutdown()
    summary = _summary(job.out, seconds, job.output)
    state.parts = [parts.PartRecord(summary.rows, summary.written, summary.rejected, summary.tokens, seconds)]
    state.done = True
    state.save(job.out)
    return summary


def _execute(job: Job, model: JobModel, options: RayOptions, sources: list[inputs.Source],
             too_long: TooLong | None) -> float:
    import ray
    import ray.data

    started = time.perf_counter()
    items = [{"index": i, "path": str(s.path.resolve()), "format": s.format, "rows": s.rows, "first_row": first}
             for i, (s, first) in enumerate(zip(sources, _first_rows(sources), strict=True))]
    good = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
        read_file, batch_size=1, batch_format="pyarrow",  # type: ignore[arg-type]  # its stubs omit fn_kwargs
        fn_kwargs={"columns": job.columns, "out": str(job.out.resolve()), "chunk_rows": options.batch_rows,
                   "too_long": too_long},
        num_cpus=READ_CPUS)
    resources = actor_resources(model.load.provider, options, ray.cluster_resources())
    embedded = good.map_batches(
        Embedder, batch_size=options.batch_rows, batch_format="pyarrow",
        fn_constructor_kwargs={"model": model, "output": job.output, "has_id_column": job.columns.id is not None,
                               "threads": options.cpus_per_actor},
        num_cpus=resources["num_cpus"], num_gpus=resources["num_gpus"] or None,
        **pool_arguments(ray.__version__, resources["actors"], ray.data.ActorPoolStrategy))
    embedded.write_parquet(str(job.out.resolve()))
    return round(time.perf_counter() - started, 3)


def _first_rows(sources: list[inputs.Source]) -> list[int]:
    firsts, first = [], 0
    for source in sources:
        firsts.append(first)
        first += source.rows or 0
    return firsts


def _prepare(out: Path, args: dict[str, Any], overwrite: bool) -> parts.JobState:
    """A finished run with the same arguments is kept; anything else in OUT needs --overwrite."""
    out.mkdir(parents=True, exist_ok=True)
    state = parts.JobState.load(out)
    if not overwrite and state is not None and state.done and state.fingerprint == parts.fingerprint(args):
        return state
    if not overwrite and any(not p.name.startswith(".") for p in out.iterdir()):
        raise JobError(f"{out} is not empty, and a Ray run does not resume; use --overwrite or another --out")
    parts.clear(out)
    state = parts.JobState(parts.fingerprint(args), args)
    state.save(out)
    return state


def _check_bundle(model: JobModel, output: JobOutput) -> tuple[JobOutput, windows.WindowCap | None]:
    """The bundle's own check (hashes, manifest) on the driver, so a bad bundle fails before Ray starts; and
    with --chunking the overlap's (`output` with it resolved is returned), and the window cap the read tasks
    apply (the bundle's tokenizer; no graph is opened)."""
    try:
        manifest = verify(model.bundle)
        tokenizer = load_tokenizer(model.bundle, manifest) if output.chunking is not None else None
    except StartupError as error:
        raise JobError(f"cannot load the bundle: {error.message}") from None
    if output.classify and not manifest.labels:
        raise JobError("--classify: this model has no classification head (manifest.json labels is empty)")
    multivector.check(manifest, output)  # first: --sparse with --outputs is refused as such
    check_sparse(manifest.task, output)
    prompt = prompt_of(manifest, output)
    if output.chunking is None or tokenizer is None:
        return output, None
    output = windows.resolve(output, tokenizer, manifest)
    assert output.chunking is not None  # resolve only fills in its overlap
    windows.check(tokenizer, output.chunking, prompt)
    return output, windows.WindowCap(tokenizer, output.chunking, prompt)


def _args(job: Job, sources: list[inputs.Source], model: JobModel) -> dict[str, Any]:
    return {"inputs": [str(s.path.resolve()) for s in sources], "formats": [s.format for s in sources],
            "text_column": job.columns.text, "id_column": job.columns.id, "output": recorded(job.output),
            "bundle": str(model.bundle.resolve()), "provider": model.load.provider, "variant": model.load.variant}


def _summary(out: Path, seconds: float, output: JobOutput) -> Summary:
    """Counted from what was written: Parquet footers (with --chunking windows, the rows of window 0: one per
    document), reject lines, and the tokens column when there is one."""
    files = sorted(out.glob("*.parquet"))
    by_window = output.chunking is not None and output.chunking.mode == "windows"
    written = sum(_documents(f) if by_window else pq.ParquetFile(f).metadata.num_rows for f in files)
    rejected = sum(len(f.read_text().splitlines()) for f in (out / parts.REJECTS).glob("*.jsonl"))
    tokens = sum(pc.sum(pq.read_table(f, columns=["tokens"])["tokens"]).as_py() or 0 for f in files) \
        if output.token_count or by_window else -1
    return Summary(written + rejected, written, rejected, tokens, seconds, len(files), str(out))


def _documents(path: Path) -> int:
    window = pq.read_table(path, columns=["window"])["window"]
    return int(pc.sum(pc.equal(window, 0)).as_py() or 0)


@contextmanager
def _rejects_file(out: Path, index: int) -> Iterator[TextIO]:
    """OUT/_rejects/input-NNNNN.jsonl, written under a temporary name and renamed once the input is read (a
    retried task rewrites it whole); no file when the input has no bad rows."""
    target = out / parts.REJECTS / f"input-{index:05d}.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(target, keep_empty=False) as tmp, tmp.open("w", encoding="utf-8") as fh:
        yield fh
