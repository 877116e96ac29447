"""The bundle contract between `export/` (which writes bundles) and `service/` (which serves them).

Torch-free and free of any other project code, so the service and its Docker image carry it alone:

    manifest.py  the manifest schema (pydantic): model facts, graphs, hashes, parity figures
    variants.py  the graph variants by name, in canonical order, and those an export builds by default
    verify.py    verify_bundle: hashes, paths inside the bundle, graph names, types and shapes
    feeds.py     the graphs' inputs: names, and right-padding token ids into (B, T) arrays
    session.py   how a bundle's graph is opened in onnxruntime (the one set of session options)
    files.py     sha256 of a file, atomic replacement of a file or a whole directory
    external_data.py  the external data files a graph reads its tensors from (graphs over 2 GiB)
    preprocessing.py  an image model's preprocessor_config.json read into the steps from image to pixel values
"""
