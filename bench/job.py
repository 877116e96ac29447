"""python -m bench.job --bundle DIR: `attnserve embed` throughput against the raw engine at the job's batch shape.

For each length L, a text file of `rows` texts of L tokens (bench.texts) is embedded by the local job
(jobs.local.run: reading, tokenising, batching, the graph, post-processing, Parquet parts), and the same
graph is timed in a bare onnxruntime session (bench.engine.EngineBench, the server's session options) at
the shape the job's batches take: all texts are L tokens long, so every batch is max_batch_size x L. The
job's rows/s is its streaming figure (its parts' seconds: start-up aside); runs are interleaved (engine,
job, engine, job ...) and the medians compared, per wall second and per CPU second of the process (all
threads; steadier than wall time on a shared machine). Target: job >= 0.9x engine on both. Rows go to
--out (JSON lines).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.engine import EngineBench
from bench.report import Recorder, machine
from bench.texts import load_tokenizer, make_texts
from inference.options import LoadOptions
from jobs.embedding import JobOutput
from jobs.local import Job, JobModel, open_bundle, run

TARGET = 0.9


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.job", description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="bundle directory")
    parser.add_argument("--variant", default="auto", help="graph variant (default: the job's own choice)")
    parser.add_argument("--lengths", default="32,128", help="comma-separated token lengths of the texts")
    parser.add_argument("--rows", type=int, default=4096, help="texts per job run (a multiple of the batch size)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved engine/job measurements per length")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results.jsonl",
                        help="JSON-lines file results are appended to")
    return parser.parse_args(argv)


def job_rates(texts_file: Path, model: JobModel, scratch: Path) -> tuple[float, float]:
    """Rows per wall second and per CPU second (this process, all threads) of the job's parts."""
    summary = run(Job((texts_file,), scratch, "text", output=JobOutput(), overwrite=True), model, io.StringIO())
    return summary.rows / summary.seconds, summary.rows / summary.cpu_seconds


def engine_rates(engine: EngineBench, batch: int, length: int) -> tuple[float, float]:
    """Rows per wall second (the median run) and per CPU second (warm-up and timed runs together)."""
    engine.cache.clear()
    started = time.process_time()
    point = engine.point(batch, length)
    return point.texts_per_s, batch * (point.runs + 1) / (time.process_time() - started)


def measure(model: JobModel, length: int, rows: int, repeats: int, rec: Recorder) -> dict:
    loaded = open_bundle(model, JobOutput())
    variant, manifest, bundle = loaded.variants["fast"], loaded.manifest, model.bundle
    tokenizer = load_tokenizer(bundle, manifest)
    batch = model.batching.max_size
    entry = manifest.graph("fast", variant)
    assert entry is not None  # chosen from this manifest
    engine = EngineBench(variant, bundle / entry.file, tokenizer, seconds=2.0)
    with tempfile.TemporaryDirectory(prefix="attnserve-bench-job-") as tmp:
        texts_file = Path(tmp) / "texts.txt"
        texts_file.write_text("".join(t + "\n" for t in make_texts(tokenizer, length, rows, seed=length)))
        engine_runs, job_runs = [], []
        for _ in range(repeats):
            engine_runs.append(engine_rates(engine, batch, length))
            job_runs.append(job_rates(texts_file, model, Path(tmp) / "out"))
    length = engine.point(batch, length).length
    row: dict[str, Any] = {"variant": variant, "batch": batch, "length": length, "rows": rows}
    for index, clock in enumerate(("wall", "cpu")):
        row[f"engine_rows_per_{clock}_s"] = statistics.median(r[index] for r in engine_runs)
        row[f"job_rows_per_{clock}_s"] = statistics.median(r[index] for r in job_runs)
        row[f"ratio_{clock}"] = row[f"job_rows_per_{clock}_s"] / row[f"engine_rows_per_{clock}_s"]
    return rec.add("job", **row)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = JobModel(args.bundle, LoadOptions(variant=args.variant))
    rec = Recorder(args.out)
    info = rec.add("machine", bundle=str(args.bundle), bench="job", **machine())
    print(f"# attnserve embed vs engine {rec.run_id}: {info['cpu']}, {info['cores']} cores, "
          f"load {info['loadavg_1m']:.2f}\n")
    print("| variant | batch x length | engine rows/s | job rows/s | job / engine | engine rows/CPU-s | "
          "job rows/CPU-s | job / engine (CPU) | target >= 0.9 | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for length in (int(n) for n in args.lengths.split(",")):
        r = measure(model, length, args.rows, args.repeats, rec)
        met = "met" if min(r["ratio_wall"], r["ratio_cpu"]) >= TARGET else "MISSED"
        print(f"| {r['variant']} | {r['batch']} x {r['length']} | {r['engine_rows_per_wall_s']:,.1f} | "
              f"{r['job_rows_per_wall_s']:,.1f} | {r['ratio_wall']:.2f}x | {r['engine_rows_per_cpu_s']:,.1f} | "
              f"{r['job_rows_per_cpu_s']:,.1f} | {r['ratio_cpu']:.2f}x | {met} | {r['loadavg_1m']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
