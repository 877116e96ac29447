"""What weights held once cost and save: `python -m bench.shared_weights BUNDLE [--variant fp32-opt]`.

Opens the bundle's fast graph (`--variant`) and its attention fp32 graph as the service does, the attention graph's
weights and the fast graph's handed from one mapped copy (bundle.weights), in a fresh process for each of: pre-packing
on for both (onnxruntime's default), for the fast graph only (the service's, bundle.session) and for neither
(`session.disable_prepacking`: MatMul reads the shared weights as they lie, instead of a packed copy of its
session's own). For each: the resident set (anonymous and file-backed,
/proc/self/status) after both sessions opened and after timed runs of the fast graph, and its median CPU time per
batch at 1 x 16, 8 x 128 and 32 x 128 tokens. Prints a table, then one JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.large_export import process_memory
from bench.procs import ROOT

SHAPES = ((1, 16, 20), (8, 128, 5), (32, 128, 3))  # B, T, timed runs


PREPACKING = {"both": ("fast", "attention"), "fast": ("fast",), "neither": ()}  # the graphs that pre-pack


def measure(bundle: Path, variant: str, prepacking: str) -> dict[str, Any]:
    """Both sessions opened on shared weights; memory and the fast graph's times."""
    import onnxruntime as ort

    from bundle.manifest import Manifest
    from bundle.session import session_options
    from bundle.weights import Weights

    ort.set_default_logger_severity(3)  # each configuration overrides the served pre-packing entry, on purpose
    manifest, weights, before = Manifest.read(bundle), Weights(), process_memory()
    sessions = {}
    for kind, name in (("fast", variant), ("attention", "fp32")):
        entry = manifest.graph(kind, name)
        assert entry is not None, (kind, name)
        options = session_options(kind=kind)
        options.add_session_config_entry("session.disable_prepacking", "0" if kind in PREPACKING[prepacking] else "1")
        held = weights.initializers(bundle, entry)
        for tensor, value in held.items():
            options.add_initializer(tensor, value)
        sessions[kind] = (ort.InferenceSession(str(bundle / entry.file), options), held)
    opened = process_memory()
    fast = sessions["fast"][0]
    cut = [(b, min(t, manifest.max_length), runs) for b, t, runs in SHAPES]  # T cut to the bundle's max length
    ms = {f"{b}x{t}": _median_ms(fast, b, t, runs) for b, t, runs in cut}
    return {"variant": variant, "prepacking": prepacking, "shared_tensors": weights.tensors, "before_kb": before,
            "opened_kb": opened, "after_runs_kb": process_memory(), "cpu_ms": ms}


def _median_ms(session: Any, batch: int, length: int, runs: int) -> float:
    ids = np.random.default_rng(0).integers(5, 100, size=(batch, length)).astype(np.int64)  # (B, T)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    feed = {i.name: feed[i.name] for i in session.get_inputs() if i.name in feed}
    session.run(["embeddings"], feed)  # allocations
    times = []
    for _ in range(runs):
        started = time.process_time()
        session.run(["embeddings"], feed)
        times.append(1000 * (time.process_time() - started))
    return statistics.median(times)


def report(rows: list[dict[str, Any]]) -> str:
    mb = 1024
    lines = ["pre-packed  | resident opened (anon + file) | after runs (anon + file) | CPU ms " +
             "/".join(rows[0]["cpu_ms"])]
    for r in rows:
        o, a = r["opened_kb"], r["after_runs_kb"]
        lines.append(f"{r['prepacking']:<11} | {o['VmRSS'] // mb} MB ({o['RssAnon'] // mb} + "
                     f"{o['RssFile'] // mb}) | {a['VmRSS'] // mb} MB ({a['RssAnon'] // mb} + {a['RssFile'] // mb}) | "
                     + "/".join(f"{v:.0f}" for v in r["cpu_ms"].values()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.shared_weights", description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--variant", default="fp32-opt", help="the fast graph served beside attention fp32")
    parser.add_argument("--prepacking", choices=PREPACKING, help=argparse.SUPPRESS)  # one configuration, here
    args = parser.parse_args(argv)
    if args.prepacking is not None:
        print(json.dumps(measure(args.bundle, args.variant, args.prepacking)))
        return 0
    rows = []
    for prepacking in PREPACKING:
        argv_ = [sys.executable, "-m", "bench.shared_weights", str(args.bundle), "--variant", args.variant,
                 "--prepacking", prepacking]
        out = subprocess.run(argv_, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(report(rows))
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
