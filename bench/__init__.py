"""Benchmarks for attnserve: figures and ratios printed, never asserted (see docs/performance.md).

bench/ imports onnxruntime, tokenizers, numpy, httpx, fastapi/uvicorn (the naive server), orjson, the
torch-free bundle package and the inference core (to run the graph as the server runs it), never torch
and never the HTTP front (`service/`): servers are measured as processes, over HTTP.
Infinity, a peer server, runs from its own virtual environment under build/peers (bench.infinity):
its torch never enters this one.
"""
