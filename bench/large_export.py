"""A model over protobuf's 2 GB limit, exported and served: `python -m bench.large_export [--preset NAME]`.

Three fresh processes, so each one's memory is its own:

    source  a seeded random-weight transformers model of the preset's shape, saved with save_pretrained and
            bench.longmodel's word-level tokenizer: its parameters and fp32 weight bytes. A preset with a
            max_seq_length is also written as a sentence-transformers model (modules.json, mean pooling,
            sentence_bert_config.json's max_seq_length) with that length as its tokenizer_config.json's
            model_max_length too, as a long-input checkpoint states it: the bundle's max length
    export  `attnserve export SOURCE --out BUNDLE --variants fp32` (what an operator runs): wall time, the
            kernel's high-water resident set (the export is the only child of a small wrapper, whose
            RUSAGE_CHILDREN peak is the export's), and the resident set sampled as each log line comes (where
            the memory goes); the export is killed if its resident set passes --rss-limit-gb
    serve   the inference core on the bundle: verify_bundle alone (seconds, peak), then load_bundle (verify,
            open the fast and attention graphs, one run each) as the service starts, the resident set it leaves
            (anonymous and file-backed, from /proc/self/status) against the weights' bytes, one embed call's time,
            and one embed of a single input of min(the bundle's max length, LONG_TOKENS) tokens: its time and the
            process's peak resident set while it ran

Presets: bert-0.6b (the default) is a BERT with Qwen3-Embedding-0.6B's vocabulary, width, depth and heads and
a feed-forward widened to 5632 so it has that model's ~0.6B parameters (2.4 GB fp32); qwen3-embedding-0.6b is
that model's own shape (28 layers, hidden 1024, 16 heads over 8 key/value heads of 128, feed-forward 3072);
modernbert-base is ModernBERT-base's shape (bench.longmodel: 22 layers, hidden 768, 12 heads, local attention 128
in two layers of three, 8,192 positions; 150M parameters) with max_seq_length 8,192.
`--set KEY=VALUE` changes any field of the transformers config (e.g. --set num_hidden_layers=2 for a smoke run).
`--source-only DIR` writes the source phase's model to DIR and stops (make bench-decoder exports it to a bundle).
The work directory (2 x the weights for the source, 2 x for the bundle's fast and attention graphs) is removed
at the end unless --keep. Prints one JSON object last.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.longmodel import MODERNBERT_BASE
from bench.procs import ROOT, tree_rss_kb

PRESETS: dict[str, dict[str, Any]] = {
    "bert-0.6b": dict(model_type="bert", vocab_size=151669, hidden_size=1024, num_hidden_layers=28,
                      num_attention_heads=16, intermediate_size=5632, max_position_embeddings=512),
    "qwen3-embedding-0.6b": dict(model_type="qwen3", vocab_size=151669, hidden_size=1024, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                                 max_position_embeddings=32768, tie_word_embeddings=True),
    "modernbert-base": dict(model_type="modernbert", **MODERNBERT_BASE, max_seq_length=8192),
}
TEXTS = 4  # texts in the served embed call, each about 60 tokens
LONG_TOKENS = 8192  # the single long input of the serve phase, cut to the bundle's max length
GIB = 1 << 30


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.large_export", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS, default="bert-0.6b")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a transformers config field (a JSON value: 24, true, \"gelu\")")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bench-large")
    parser.add_argument("--variants", default="fp32", help="what `attnserve export --variants` builds")
    parser.add_argument("--rss-limit-gb", type=float, default=10.0, help="kill the export past this resident set")
    parser.add_argument("--keep", action="store_true", help="keep the source and the bundle")
    parser.add_argument("--source-only", type=Path, metavar="DIR",
                        help="write the preset's random-weight model to DIR (save_pretrained) and stop")
    parser.add_argument("--phase", choices=("source", "export", "serve"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def model_config(args: argparse.Namespace) -> dict[str, Any]:
    config = dict(PRESETS[args.preset])
    for item in args.set:
        key, _, value = item.partition("=")
        config[key] = json.loads(value)
    return config


def write_source(directory: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The seeded random-weight model, saved (as a sentence-transformers model when the config names a
    max_seq_length); its parameter count and fp32 bytes."""
    import torch
    import transformers

    from bench.longmodel import word_level_tokenizer

    settings = {k: v for k, v in config.items() if k not in ("model_type", "max_seq_length")}
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(config["model_type"], **settings))
    model.save_pretrained(directory)
    word_level_tokenizer().save(str(directory / "tokenizer.json"))
    if config.get("max_seq_length"):
        write_sentence_files(directory, config["max_seq_length"], model.config.hidden_size)
    parameters = sum(p.numel() for p in model.parameters())
    return {"parameters": parameters, "weight_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}


def write_sentence_files(directory: Path, max_seq_length: int, hidden_size: int) -> None:
    """modules.json (Transformer, mean Pooling), sentence_bert_config.json and tokenizer_config.json, each
    stating `max_seq_length` where sentence-transformers 5 and 6 read it (model.sentence.max_seq_length)."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"model_max_length": max_seq_length}))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden_size, "pooling_mode_mean_tokens": True}))


def export_peak(source: Path, bundle: Path, variants: str) -> dict[str, Any]:
    """`attnserve export` as this process's only child: its exit code and the kernel's peak resident set."""
    argv = [sys.executable, "-m", "attnserve", "export", str(source), "--out", str(bundle), "--variants", variants]
    code = subprocess.run(argv, cwd=ROOT).returncode
    return {"returncode": code, "peak_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}


def serve(bundle: Path) -> dict[str, Any]:
    """verify_bundle, then load_bundle as the service does, then one embed through the core; times and memory."""
    import asyncio

    from bundle.verify import verify_bundle
    from inference.options import LoadOptions
    from inference.runtime.loading import load_bundle

    base = process_memory()
    started = time.perf_counter()
    verify_bundle(bundle)
    verified, verify_peak = time.perf_counter() - started, process_memory()["VmHWM"]
    _reset_peak()
    started = time.perf_counter()
    loaded = load_bundle(bundle, LoadOptions(), kinds=("fast", "attention"))  # as the service serves it
    load_s, after = time.perf_counter() - started, process_memory()
    embeds = asyncio.run(_embed_seconds(loaded, min(loaded.manifest.max_length, LONG_TOKENS)))
    return {"verify_s": verified, "verify_peak_rss_kb": verify_peak, "load_s": load_s, **embeds,
            "served": loaded.variants,
            "max_length": loaded.manifest.max_length,
            "rss_before_kb": base["VmRSS"], "load_peak_rss_kb": after["VmHWM"], "rss_after_load_kb": after["VmRSS"],
            "rss_anon_after_load_kb": after["RssAnon"], "rss_file_after_load_kb": after["RssFile"]}


async def _embed_seconds(loaded: Any, long_tokens: int) -> dict[str, Any]:
    """Seconds of one embed call of TEXTS texts through the core's batcher (ServedModel, embed.embed), then
    of one input of `long_tokens` tokens, with the process's peak resident set during it."""
    from bench.texts import WORDS
    from inference.options import ServingOptions
    from inference.registry import start_models
    from inference.tasks import embed

    options = ServingOptions(max_input_chars=1 << 20)  # the long input is ~40,000 characters
    models, executors = start_models(["large"], [loaded], options)
    texts = [" ".join(WORDS[(i * 60 + j) % len(WORDS)] for j in range(60)) for i in range(TEXTS)]
    long_text = " ".join(WORDS[j % len(WORDS)] for j in range(long_tokens - 2))  # a word a token, + [CLS] [SEP]
    try:
        started = time.perf_counter()
        vectors = (await embed.embed(models.default, texts, truncate=True)).vectors
        assert vectors.shape[0] == TEXTS and bool((vectors == vectors).all()), "no finite vectors"
        embed_s = time.perf_counter() - started
        _reset_peak()
        started = time.perf_counter()
        long = await embed.embed(models.default, [long_text], truncate=False)
        long_s = time.perf_counter() - started
        assert long.tokens == long_tokens and bool((long.vectors == long.vectors).all()), (long.tokens, "not finite")
        return {"embed_s": embed_s, "long_tokens": long.tokens, "long_s": long_s,
                "long_peak_rss_kb": process_memory()["VmHWM"]}
    finally:
        await models.default.batcher.stop()
        for executor in executors:
            executor.shutdown()


def process_memory(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process (or of process `pid`), kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0])
    return fields


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := VmRSS


def run_phase(args: argparse.Namespace, phase: str, *paths: Path) -> dict[str, Any]:
    """This script's `phase` in a fresh process; its last stdout line, parsed."""
    argv = [sys.executable, "-m", "bench.large_export", "--phase", phase, "--preset", args.preset,
            "--variants", args.variants, *[f"--set={s}" for s in args.set], *map(str, paths)]
    out = subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def timed_export(args: argparse.Namespace, source: Path, bundle: Path) -> dict[str, Any]:
    """The export phase, watched: its log lines with the resident set when each came and the peak before it."""
    argv = [sys.executable, "-m", "bench.large_export", "--phase", "export", "--variants", args.variants,
            str(source), str(bundle)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr or []:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timeline: list[dict[str, Any]] = []
    peak, seen = 0, 0
    while proc.poll() is None:
        rss = tree_rss_kb(proc.pid)
        peak = max(peak, rss)
        if rss > args.rss_limit_gb * GIB / 1024:
            os.killpg(proc.pid, 9)
            raise SystemExit(f"export passed {args.rss_limit_gb} GB resident; killed. Timeline: {timeline}")
        new = lines[seen:]
        seen += len(new)
        for line in (line for line in new if "torchvision" not in line):  # the exporter's noise
            timeline.append({"s": round(time.perf_counter() - started, 1), "rss_gb": round(rss / (GIB / 1024), 2),
                             "peak_gb": round(peak / (GIB / 1024), 2), "log": line.strip()[:100]})
            peak = rss
        time.sleep(0.2)
    reader.join()
    result = json.loads((proc.stdout.read() if proc.stdout else "").strip().splitlines()[-1])
    if result["returncode"] != 0:
        raise SystemExit(f"the export failed: {''.join(lines[-20:])}")
    return {**result, "export_s": time.perf_counter() - started, "timeline": timeline}


def bundle_bytes(bundle: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(bundle.iterdir())}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.source_only is not None:
        print(json.dumps(write_source(args.source_only, model_config(args))))
        return 0
    if args.phase is not None:
        phase = {"source": lambda: write_source(args.paths[0], model_config(args)),
                   "export": lambda: export_peak(args.paths[0], args.paths[1], args.variants),
                   "serve": lambda: serve(args.paths[0])}[args.phase]()
        print(json.dumps(phase))
        return 0
    source, bundle = args.work / "source", args.work / "bundle"
    shutil.rmtree(args.work, ignore_errors=True)
    try:
        figures: dict[str, Any] = {"config": model_config(args), **run_phase(args, "source", source)}
        figures.update(timed_export(args, source, bundle))
        figures["files"] = bundle_bytes(bundle)
        figures["parity"] = {g["file"]: {k: v for k, v in g["parity"].items()
                                         if k.endswith(("max_abs_diff", "_float64_error", "_float64_limit"))}
                             for g in json.loads((bundle / "manifest.json").read_text())["graphs"]}
        figures.update(run_phase(args, "serve", bundle))
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    print(report(figures))
    print(json.dumps(figures))
    return 0


def report(f: dict[str, Any]) -> str:
    gb = GIB / 1024
    weights = f["weight_bytes"] / GIB
    rows = [
        f"model          {f['config']['model_type']}, {f['parameters'] / 1e6:.0f}M parameters, {weights:.2f} GiB fp32",
        f"export         {f['export_s']:.0f} s, peak resident {f['peak_rss_kb'] / gb:.2f} GiB "
        f"({f['peak_rss_kb'] / gb / weights:.2f} x the weights)",
        f"bundle         {', '.join(f'{n} {b / GIB:.2f} GiB' for n, b in f['files'].items() if b > GIB / 100)}",
        f"verify         {f['verify_s']:.1f} s, peak resident {f['verify_peak_rss_kb'] / gb:.2f} GiB",
        f"load (service) {' + '.join(f'{k} {v}' for k, v in f['served'].items())}: {f['load_s']:.1f} s, "
        f"peak {f['load_peak_rss_kb'] / gb:.2f} GiB; resident after "
        f"{f['rss_after_load_kb'] / gb:.2f} GiB (anonymous {f['rss_anon_after_load_kb'] / gb:.2f}, file "
        f"{f['rss_file_after_load_kb'] / gb:.2f}; {f['rss_before_kb'] / gb:.2f} before) = "
        f"{(f['rss_after_load_kb'] - f['rss_before_kb']) / gb / weights:.2f} x the weights",
        f"embed          {TEXTS} texts of ~60 tokens: {f['embed_s']:.2f} s",
        f"embed, long    one input of {f['long_tokens']} tokens (max length {f['max_length']}): {f['long_s']:.1f} s, "
        f"peak resident {f['long_peak_rss_kb'] / gb:.2f} GiB",
        *[f"parity         {name}: {', '.join(f'{k} {v:.2g}' for k, v in diffs.items())}"
          for name, diffs in f["parity"].items()],
        "export timeline (s, resident GiB when the line came, peak GiB before it, line):",
        *[f"  {t['s']:7.1f} {t['rss_gb']:6.2f} {t['peak_gb']:6.2f}  {t['log']}" for t in f["timeline"]],
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
