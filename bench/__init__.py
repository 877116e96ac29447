"""Benchmarks for attnserve: figures and ratios printed, never asserted (see docs/performance.md).

bench/ is service-side tooling: it imports onnxruntime, tokenizers, numpy, httpx, fastapi/uvicorn,
orjson, the torch-free bundle package and the service's settings (to run the engine as the service
runs it), never torch.
"""
