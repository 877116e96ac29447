"""One point of bench.lengths, in a fresh process: `python -m bench.peak {ours,reference} BUNDLE TOKENS`.

Loads one side, notes its resident set, resets the process's peak resident set (Linux: writing 5 to
/proc/self/clear_refs resets VmHWM), then runs one warm-up and --repeats timed runs of one input of TOKENS
tokens (batch 1; --repeats 0: one cold run, timed) and prints one JSON line: median wall and CPU milliseconds
per run, the resident set after loading, and the peak during the runs less that (VmHWM - VmRSS before: what the
input cost on top of the loaded model, the allocators' arenas and caches included, as the operating system counts
it). --save writes the last run's answer, the (T, D) token states, as a .npy file (bench.lengths compares the two
sides').

    ours       the bundle's fast fp32 graph in onnxruntime (CPU), opened as the service opens it (bundle.session);
               with --maps LAYERS:HEADS its attention graph instead, computing the maps of only those layers and
               heads (comma-separated indices, e.g. 0:0), as the service runs an /attention request for them
    reference  transformers' AutoModel from the bundle's source directory, its default attention on CPU (sdpa),
               under torch.inference_mode; its weights are paged in before the resident set is noted

Both read the same token ids: a text of bench.texts' words made TOKENS tokens long by the bundle's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.texts import load_tokenizer, make_text
from bundle.feeds import selected, selects
from bundle.manifest import Manifest
from bundle.session import open_session

SIDES = ("ours", "reference")


def input_ids(bundle: Path, manifest: Manifest, tokens: int) -> np.ndarray:
    """(1, T) int64 ids of one text of `tokens` tokens ([CLS] and [SEP] included)."""
    tokenizer = load_tokenizer(bundle, manifest)
    ids = tokenizer.encode(make_text(tokenizer, tokens, seed=tokens)).ids
    if len(ids) != tokens:
        raise ValueError(f"could not make a text of {tokens} tokens with this tokenizer (got {len(ids)})")
    return np.array([ids], dtype=np.int64)  # (1, T)


def ours(bundle: Path, manifest: Manifest, threads: int, maps: tuple[list[int], list[int]] | None = None,
         arena: bool = True) -> Callable[[np.ndarray], Any]:
    kind = "attention" if maps else "fast"
    entry = manifest.graph(kind, "fp32")
    if entry is None:
        raise SystemExit(f"{bundle} has no {kind} fp32 graph")
    session = open_session(bundle / entry.file, "cpu", threads, arena=arena, kind=kind)
    chosen = selected(*maps) if maps else {}
    if chosen and not selects(session):
        raise SystemExit(f"{bundle}'s attention graph computes every map (exported before it took a choice)")
    output = "attentions" if maps else "token_embeddings"
    return lambda ids: session.run([output], {"input_ids": ids, "attention_mask": np.ones_like(ids)} | chosen)[0][0]


def maps_choice(value: str) -> tuple[list[int], list[int]]:
    """--maps LAYERS:HEADS -> (layers, heads): comma-separated indices each side of one colon."""
    try:
        layers, heads = ([int(i) for i in part.split(",")] for part in value.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--maps takes LAYERS:HEADS, e.g. 0:0 or 0,5:1,2, not {value!r}") from None
    return layers, heads


def reference(bundle: Path, manifest: Manifest, threads: int) -> Callable[[np.ndarray], Any]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    model = transformers.AutoModel.from_pretrained(manifest.source.path).eval()
    with torch.inference_mode():  # page in weights still mapped from model.safetensors: they are the model, not
        for param in model.parameters():  # what an input costs
            param.sum()
    print(json.dumps({"attn_implementation": model.config._attn_implementation}), flush=True)

    def run(ids: np.ndarray) -> Any:
        with torch.inference_mode():
            tensor = torch.from_numpy(ids)
            return model(input_ids=tensor, attention_mask=torch.ones_like(tensor)).last_hidden_state[0].numpy()
    return run


def status_kb(field: str) -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def measure(run: Callable[[np.ndarray], Any], ids: np.ndarray, repeats: int) -> dict[str, float]:
    before_kb = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    if repeats:
        run(ids)  # warm-up: the allocator's arenas grow here; they count in the peak
    walls, cpus = [], []
    for _ in range(max(repeats, 1)):  # repeats 0: one run, timed cold (a run of many minutes)
        wall, cpu = time.perf_counter(), time.process_time()
        run(ids)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"wall_ms": 1e3 * statistics.median(walls), "cpu_ms": 1e3 * statistics.median(cpus),
            "loaded_mb": before_kb / 1024, "peak_mb": (status_kb("VmHWM") - before_kb) / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.peak", description=__doc__.splitlines()[0])
    p.add_argument("side", choices=SIDES)
    p.add_argument("bundle", type=Path)
    p.add_argument("tokens", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--save", type=Path, help="write the last run's answer here (.npy): (T, D) token states, with "
                   "--maps the (l, h, T, T) maps")
    p.add_argument("--maps", metavar="LAYERS:HEADS", type=maps_choice,
                   help="ours: run the attention graph for these layers' and heads' maps (e.g. 0:0 or 0,5:1,2)")
    p.add_argument("--no-arena", action="store_true",
                   help="ours: onnxruntime's CPU memory arena off (the service keeps it on)")
    args = p.parse_args(argv)
    manifest = Manifest.read(args.bundle)
    ids = input_ids(args.bundle, manifest, args.tokens)
    if (args.maps or args.no_arena) and args.side != "ours":
        raise SystemExit("--maps and --no-arena are for ours (onnxruntime)")
    run = ours(args.bundle, manifest, args.threads, args.maps, not args.no_arena) if args.side == "ours" else \
        reference(args.bundle, manifest, args.threads)
    answer: dict[str, Any] = {}

    def kept(x: np.ndarray) -> Any:
        answer.clear()  # the previous answer is let go before the next run, as a caller would
        answer["states"] = run(x)
        return answer["states"]

    figures = measure(kept, ids, args.repeats)
    if args.save:
        np.save(args.save, answer["states"])
    print(json.dumps({"side": args.side, "tokens": args.tokens, "repeats": args.repeats, **figures}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
