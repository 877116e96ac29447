"""Corpus jobs: `attnserve embed` embeds files of documents into Parquet with the inference core, on one
machine (jobs.local) or on a Ray cluster (jobs.ray).

    cli.py        the command line; the core's options as flags
    options.py    what a job is asked for (JobOutput, Chunking, JobError); its prompt and adapter, by the core's rules
    inputs.py     JSONL, CSV, Parquet, text read in bounded chunks, bad rows as values
    batched.py    ids to graph outputs: `TextTokenizer.encode_ids`, batches by `BatchQueue.next_batch`
    embedding.py  rows to vectors: bad rows set aside, `inference.postprocess` on the outputs
    windows.py    --chunking: documents cut by `inference.chunking.cut`, pooled by `chunking.pool`
    multivector.py  --outputs: a multi-vector bundle's dense, lexical and token vectors from one run
    images.py     --images DIR, --image-column: image rows checked by the caps, decoded by the core, bad ones set aside
    tables.py     the output's Arrow schema and tables
    local.py      the job on one machine: parts, resume, progress
    ray.py        the same job on Ray Data
    parts.py      numbered Parquet parts and _job.json, written whole
    progress.py   the progress line

Nothing here imports torch, model/, export/ or service/: the Docker image carries this package too."""
