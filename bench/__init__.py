"""Benchmarks for attnserve: figures and ratios printed, never asserted (see docs/performance.md).

bench/ is service-side tooling: it imports onnxruntime, tokenizers, numpy, httpx, fastapi/uvicorn,
orjson and the torch-free bundle package only, never torch.
"""
