"""Models by name, torch-free: a hub repository id (or a local directory) at a revision, to a verified bundle in the
bundle cache, found again with no hub and no torch. `attnserve serve --model` and `attnserve pull` stand on it.

    names.py    `[ALIAS=]NAME[@REVISION]` as the command line gives it
    options.py  what a named model's bundle is made with (variants, reranker recipe) and where it is kept
    cache.py    the bundle cache's layout and keys, the revisions it resolved, writing into it
    remote.py   the hub through huggingface_hub: a revision's commit and files, downloads, its refusals in one line
    fetch.py    what is downloaded: a repository's own bundle (verified), or a checkpoint's files, small ones first
    models.py   a named model to its bundle: resolve, find in the cache, or make it (fetch, or the export step)
    errors.py   why a model cannot be had, in one line each

The export step itself (torch) is export/pull.py, run in a subprocess by the server.
"""
