"""Quick onnxruntime timings of a bundle's graphs: `python -m bench.graphs BUNDLE [--batch 32 --tokens 128]`.

Prints milliseconds per batch, per text and texts per second for each graph, by wall clock and by process
CPU time (the CPU figure is steadier on a shared machine), at each batch size and length asked for
(`--batch 4,16,64 --tokens 128,256`: what a batch of each size costs per text). A benchmark that prints, not
a test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bundle.manifest import GraphEntry, Manifest
from bundle.session import open_session


def feeds(batch: int, tokens: int, vocab: int, types: bool = False) -> dict[str, np.ndarray]:
    """Random ids, all real; token type ids (all 0) for a graph that takes them."""
    ids = np.random.default_rng(0).integers(1000, vocab, size=(batch, tokens)).astype(np.int64)  # (B, T)
    types_feed = {"token_type_ids": np.zeros_like(ids)} if types else {}
    return {"input_ids": ids, "attention_mask": np.ones_like(ids), **types_feed}


def time_graph(path: Path, inputs: dict[str, np.ndarray], threads: int, repeats: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) per run after one warm-up run."""
    sess = open_session(path, "cpu", threads)
    sess.run(None, inputs)
    runs = []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        sess.run(None, inputs)
        runs.append((time.perf_counter() - wall, time.process_time() - cpu))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def report(bundle: Path, entry: GraphEntry, inputs: dict[str, np.ndarray], threads: int, repeats: int) -> str:
    wall, cpu = time_graph(bundle / entry.file, inputs, threads, repeats)
    batch, tokens = inputs["input_ids"].shape
    return (f"{entry.file:<24} {batch:3d} x {tokens:<4d} wall {wall * 1e3:7.0f} ms ({wall * 1e3 / batch:6.2f} ms/text, "
            f"{batch / wall:6.1f} texts/s, {threads} threads)  cpu {cpu * 1e3:7.0f} ms ({cpu * 1e3 / batch:6.2f} "
            f"ms/text)")


def sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.graphs", description=__doc__.splitlines()[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("--batch", type=sizes, default=[32], help="batch sizes, comma-separated (32)")
    p.add_argument("--tokens", type=sizes, default=[128], help="tokens per text, comma-separated (128)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per point; the best is printed")
    p.add_argument("--variant", help="only this variant's graphs (fp32, fp32-opt, int8)")
    args = p.parse_args(argv)
    manifest = Manifest.read(args.bundle)
    for entry in manifest.graphs:
        if entry.variant == "fp16" or args.variant not in (None, entry.variant):
            continue  # fp16 is meant for CUDA; CPU timings of it mean nothing
        types = "token_type_ids" in [i.name for i in entry.inputs]
        for tokens in args.tokens:
            for batch in args.batch:
                inputs = feeds(batch, tokens, manifest.model_config_["vocab_size"], types)
                print(report(args.bundle, entry, inputs, args.threads, args.repeats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
