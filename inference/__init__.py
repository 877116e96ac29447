"""The inference core: torch-free and HTTP-free.

It loads bundles into onnxruntime sessions (`loading`, with the provider and variant policy of `variants`),
keeps the registry of served models (`registry`), admits, tokenises (`tokenize`), chunks (`chunking`), batches
(`batchqueue`, `batcher`), answers repeats exactly (`cache`, `shared`), runs graphs (`graphs`) and
post-processes (`postprocess`), and answers in types (`results`). Callers pass the few options it needs
(`options`); it raises the domain errors of `errors`. `service/` (HTTP), `jobs/` (corpus jobs) and `bench/`
build on it; it imports none of them, nor FastAPI, uvicorn or torch.
"""
