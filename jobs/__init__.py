"""Corpus jobs: `attnserve embed` embeds files of documents into Parquet with the service's runtime, on one
machine (jobs.embed) or on a Ray cluster (jobs.ray). Like service/, nothing here imports torch, model/ or
export/: the Docker image carries this package too."""
