"""Corpus jobs: `attnserve embed` embeds files of documents into Parquet with the inference core, on one
machine (jobs.local) or on a Ray cluster (jobs.ray).

    cli.py        the command line; the core's options as flags
    inputs.py     JSONL, CSV, Parquet, text read in bounded chunks, bad rows as values
    embedding.py  rows to vectors: bad rows set aside, batching as the server batches, the Arrow table
    windows.py    --chunking: documents cut into windows and pooled as the server does
    local.py      the job on one machine: parts, resume, progress
    ray.py        the same job on Ray Data
    parts.py      numbered Parquet parts and _job.json, written whole
    progress.py   the progress line

Nothing here imports torch, model/, export/ or service/: the Docker image carries this package too."""
