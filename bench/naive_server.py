"""The naive baseline: per-request FastAPI + onnxruntime, no batching, one session per graph.

Each request is tokenised, run and answered on its own in FastAPI's thread pool (plain `def`
routes, the way such a server is usually first written). Responses are written with orjson so the
comparison with attnserve measures batching and scheduling rather than JSON libraries.
Run: python -m bench.naive_server --bundle DIR --variant fp32 --port P (127.0.0.1 only).
"""

from __future__ import annotations

import argparse
import base64
from pathlib import Path

import numpy as np
import orjson
import uvicorn
from fastapi import FastAPI, Response

from bench.engine import encode
from bench.texts import load_tokenizer
from bundle.feeds import input_names
from bundle.manifest import Manifest
from bundle.session import open_session


def _texts(body: dict) -> list[str]:
    value = body.get("inputs", body.get("input"))
    return [value] if isinstance(value, str) else list(value or [])


def _json(value: object) -> Response:
    return Response(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json")


def create_app(bundle: Path, variant: str) -> FastAPI:
    manifest = Manifest.read(bundle)
    tokenizer = load_tokenizer(bundle, manifest)
    fast = open_session(bundle / _graph(manifest, "fast", variant))
    attention = manifest.graph("attention", "fp32")
    attention_session = open_session(bundle / attention.file, kind="attention") if attention else None
    names = input_names(fast)  # token_type_ids too for a BERT-family graph
    app = FastAPI()

    def embed_texts(texts: list[str]) -> np.ndarray:
        (pooled,) = fast.run(["embeddings"], encode(tokenizer, texts, names=names))  # (B, D)
        if manifest.normalize:
            pooled = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled.astype(np.float32)

    @app.get("/ready")
    def ready() -> dict:
        return {"status": "ready"}

    @app.post("/embed")
    def embed(body: dict) -> Response:
        return _json(embed_texts(_texts(body)))

    @app.post("/v1/embeddings")
    def openai(body: dict) -> Response:
        vectors = embed_texts(_texts(body))
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        return _json({"object": "list", "data": data, "model": manifest.name})

    @app.post("/attention")
    def attend(body: dict) -> Response:
        if attention_session is None:
            return _json({"error": "bundle has no fp32 attention graph"})
        text = _texts(body)[0]
        (maps,) = attention_session.run(["attentions"], encode(tokenizer, [text], names=names))  # (1, L, H, T, T)
        data = base64.b64encode(maps[0].astype("<f2").tobytes()).decode()
        item = {"tokens": _tokens(tokenizer, text), "shape": list(maps.shape[1:]), "attention": data}
        return _json({"model": manifest.name, "aggregation": "none", "encoding": "base64", "dtype": "float16",
                      "data": [item]})

    return app


def _graph(manifest: Manifest, kind: str, variant: str) -> str:
    entry = manifest.graph(kind, variant)
    if entry is None:
        raise SystemExit(f"bundle has no {kind} graph in variant {variant}")
    return entry.file


def _tokens(tokenizer, text: str) -> list[dict]:
    e = tokenizer.encode(text)
    special = set(e.special_tokens_mask and [i for i, s in enumerate(e.special_tokens_mask) if s])
    return [{"id": i, "text": t, "start": a, "stop": b, "special": n in special}
            for n, (i, t, (a, b)) in enumerate(zip(e.ids, e.tokens, e.offsets, strict=True))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = create_app(args.bundle, args.variant)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
