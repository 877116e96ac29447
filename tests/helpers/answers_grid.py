"""Run as a script under the code on PYTHONPATH (a past commit's tree, or this one): the answers of /embed and
/v1/embeddings over a grid of prompts, adapters and chunking settings, and a digest of `attnserve embed`'s Parquet
for the same settings, for the bundles under ROOT (built by the first run, so every run serves the same files),
written to ROOT/NAME.json. tests/reliability/test_equal_to_before.py compares two runs bit for bit."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

TEXTS = ["A three-hour cinema master class.", "Café crème à Zürich, le matin",
         " ".join(["the long document goes on and on"] * 12)]
CHUNKS: list[dict[str, Any]] = [{}, {"chunking": "mean"}, {"chunking": "windows", "chunk_overlap": 2}]


def bundles(root: Path) -> dict[str, Path]:
    """A LoRA model with task prompts (jina-embeddings-v3's layout) and a sentence-transformers model with prompts."""
    from tests.helpers.exports import export_case
    from tests.helpers.tasks import export_task_bundle, make_task_model

    if not (root / "jina-bundle" / "manifest.json").exists():
        export_task_bundle(make_task_model(root / "jina"), root / "jina-bundle")
    if not (root / "mpnet" / "bundle" / "manifest.json").exists():
        export_case("mpnet-sentence", root / "mpnet")
    return {"jina": root / "jina-bundle", "mpnet": root / "mpnet" / "bundle"}


def requests(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    prompts = [None, *sorted(manifest.get("prompts", {}))]
    adapters = [None, *[a["name"] for a in manifest.get("adapters", [])]]
    grid = []
    for prompt in prompts:
        for adapter in adapters:
            task = {"task": adapter} if adapter else {}
            for chunk in CHUNKS:
                named = {"prompt_name": prompt} if prompt else {}
                grid.append(("/embed", {"inputs": TEXTS, **chunk, **task, **named}))
                for kind in (None, "query", "document"):
                    grid.append(("/v1/embeddings", {"input": TEXTS, **chunk, **task,
                                                    **({"input_type": kind} if kind else {})}))
    return grid


async def answers(bundle: Path) -> dict[str, str]:
    from tests.helpers.serving import serving

    got = {}
    async with serving(bundle, intra_op_threads=1) as (_, client):
        for path, body in requests(json.loads((bundle / "manifest.json").read_text())):
            response = await client.post(path, json=body)
            answer = response.json()
            if path == "/v1/embeddings" and response.status_code == 200:
                answer = [item["embedding"] for item in answer["data"]]
            got[json.dumps([path, body], sort_keys=True)] = json.dumps([response.status_code, answer])
    return got


def job_flags(manifest: dict[str, Any]) -> dict[str, list[str]]:
    flags = {"plain": [], "mean": ["--chunking", "mean"], "windows": ["--chunking", "windows", "--chunk-overlap", "2"]}
    for prompt in sorted(manifest.get("prompts", {})):
        flags[f"prompt {prompt}"] = ["--prompt-name", prompt]
    for adapter in [a["name"] for a in manifest.get("adapters", [])]:
        flags[f"task {adapter}"] = ["--task", adapter]
        flags[f"task {adapter} mean"] = ["--task", adapter, "--chunking", "mean"]
    return flags


def job_digest(bundle: Path, flags: list[str], work: Path) -> str:
    """sha256 over `attnserve embed`'s rows (by id), every value as its bytes."""
    import numpy as np
    import pyarrow.parquet as pq

    docs, out = work / "docs.jsonl", work / "out"
    docs.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    subprocess.run([sys.executable, "-m", "attnserve", "embed", str(docs), "--bundle", str(bundle), "--out", str(out),
                    "--overwrite", *flags], check=True, capture_output=True)
    rows = pq.read_table(out).sort_by("id").to_pylist()
    flat = [{k: np.asarray(v).tobytes().hex() if isinstance(v, list) else v for k, v in row.items()} for row in rows]
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()


def main(root: Path, name: str) -> None:
    result: dict[str, dict[str, str]] = {}
    for model, bundle in bundles(root).items():
        result[model] = asyncio.run(answers(bundle))
        manifest = json.loads((bundle / "manifest.json").read_text())
        work = root / f"job-{name}"
        work.mkdir(exist_ok=True)
        result[f"{model} jobs"] = {k: job_digest(bundle, f, work) for k, f in job_flags(manifest).items()}
    (root / f"{name}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
