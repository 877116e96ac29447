"""What N LoRA adapters cost a served graph: `python -m bench.adapters [--adapters 5] [--rank 16] [--embeddings]`.

Three kinds of fresh process, so each one's memory is its own:

    source  a seeded random-weight BertModel of BERT-base's shape (12 layers, 768 wide, 12 heads, feed-forward 3072,
            vocabulary 30522, or --vocab: 250002 is XLM-R's) saved with save_pretrained and bench.longmodel's
            word-level tokenizer, and N PEFT LoRA adapters of rank R over it on every attention and MLP projection
            (query, key, value, attention output, intermediate, output; --embeddings: and the token embeddings,
            word_embeddings), lora_B (and an embedding's lora_embedding_A) drawn at random, each saved with
            save_pretrained
    graphs  the fast fp32 graph of the base alone and of the base with the N adapters (export.graphs.export_graph
            on model.lora.adapted_encoder, as `attnserve export --adapter` builds it, without the gates and
            timings): each graph's file size
    serve   one process per graph: an onnxruntime session on it as the service opens one (bundle.session), then
            two runs of 8 x 128 tokens (rows spread over the base and the adapters); the process's resident set
            (VmRSS; RssAnon, mostly onnxruntime's copy of the weights) once the session is open and after the runs,
            each taken after malloc_trim(0), so that memory freed while the graph file was read (and kept by the
            allocator) is not counted, the peak (VmHWM), which includes it, and how far the runs raised the
            resident set at their peak (run_peak_kb: VmHWM, reset through /proc/self/clear_refs once the session is
            open, less VmRSS then)

bench/ itself never imports torch: the source and graphs phases import it inside their own processes, as
bench.large_export does. The work directory (about 1.2 GB) is removed at the end unless --keep. Prints one JSON
object last; docs/export.md ("Adapters") has the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.large_export import process_memory
from bench.procs import ROOT

SHAPE: dict[str, Any] = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=512)
TARGETS = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.adapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=int, default=5, help="how many adapters (default 5)")
    parser.add_argument("--rank", type=int, default=16, help="each adapter's rank (default 16)")
    parser.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"], help="layers (default 12)")
    parser.add_argument("--vocab", type=int, default=SHAPE["vocab_size"], help="vocabulary (default 30522)")
    parser.add_argument("--embeddings", action="store_true", help="the adapters adapt the token embeddings too")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bench-adapters", help="work directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--phase", choices=("source", "graphs", "serve"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def write_source(work: Path, adapters: int, rank: int, layers: int, vocab: int, embeddings: bool) -> dict[str, Any]:
    """The base and its adapters, saved under `work`; their fp32 bytes."""
    import peft
    import torch
    import transformers

    from bench.longmodel import word_level_tokenizer

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(**{**SHAPE, "num_hidden_layers": layers,
                                                              "vocab_size": vocab}))
    targets = [*TARGETS, "word_embeddings"] if embeddings else TARGETS
    model.save_pretrained(work / "base")
    word_level_tokenizer().save(str(work / "base" / "tokenizer.json"))
    sizes = []
    for index in range(adapters):
        adapted = peft.get_peft_model(transformers.BertModel.from_pretrained(work / "base"),
                                      peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))
        with torch.no_grad():
            for name, param in adapted.named_parameters():
                if "lora_B" in name or "lora_embedding_A" in name:  # PEFT's zero-initialised halves
                    param.normal_(0.0, 0.02)
        adapted.save_pretrained(str(work / f"adapter{index}"))
        sizes.append(sum(4 * p.numel() for n, p in adapted.named_parameters() if "lora_" in n))
    return {"base_bytes": sum(4 * p.numel() for p in model.parameters()), "adapter_bytes": sizes}


def write_graphs(work: Path, adapters: int) -> dict[str, Any]:
    """The fast fp32 graph of the base, and of the base with every adapter; their file sizes."""
    from export.graphs import export_graph
    from model.adapters import adapted_encoder
    from model.load import load_model
    from model.peft import read_adapter

    base = load_model(work / "base").encoder
    export_graph(base, "fast", work / "base.onnx")
    pairs = {f"adapter{i}": read_adapter(f"adapter{i}", work / f"adapter{i}", work / "base").pairs
             for i in range(adapters)}
    export_graph(adapted_encoder(base, pairs), "fast", work / "adapted.onnx")
    return {name: (work / f"{name}.onnx").stat().st_size for name in ("base", "adapted")}


def serve(graph: Path, adapters: int) -> dict[str, Any]:
    """A served session on `graph` and two 8 x 128 runs: this process's memory (kB) with the session open and
    after the runs, and how far the runs raised it at their peak."""
    import ctypes

    from bundle.feeds import ADAPTER, input_names, pad
    from bundle.session import open_session

    trim = ctypes.CDLL("libc.so.6").malloc_trim
    session = open_session(graph, "cpu")
    trim(0)
    opened = process_memory()
    names = input_names(session)
    rows = [list(range(5, 133))] * 8  # (B, T) = 8 x 128
    feeds = pad(rows, 0, names, adapters=[i % (adapters + 1) for i in range(8)] if ADAPTER in names else None)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    for _ in range(2):
        session.run(None, feeds)
    run_peak = process_memory()["VmHWM"] - opened["VmRSS"]
    trim(0)
    return {"session_kb": opened, "after_runs_kb": process_memory(), "run_peak_kb": run_peak}


def _phase(args: argparse.Namespace, phase: str, *paths: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.adapters", "--phase", phase, "--adapters", str(args.adapters),
            "--rank", str(args.rank), "--layers", str(args.layers), "--vocab", str(args.vocab), "--work",
            str(args.work), *(["--embeddings"] if args.embeddings else []), *map(str, paths)]
    out = subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.phase == "source":
        print(json.dumps(write_source(args.work, args.adapters, args.rank, args.layers, args.vocab, args.embeddings)))
        return 0
    if args.phase == "graphs":
        print(json.dumps(write_graphs(args.work, args.adapters)))
        return 0
    if args.phase == "serve":
        print(json.dumps(serve(args.paths[0], args.adapters)))
        return 0
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    try:
        report = {"adapters": args.adapters, "rank": args.rank, "layers": args.layers, "vocab": args.vocab,
                  "embeddings": args.embeddings,
                  **_phase(args, "source"), "graph_bytes": _phase(args, "graphs")}
        report["serve"] = {name: _phase(args, "serve", args.work / f"{name}.onnx") for name in ("base", "adapted")}
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
