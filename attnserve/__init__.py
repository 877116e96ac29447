"""attnserve: serve transformer encoders (embeddings, classifications, attention maps)."""

__version__ = "0.1.0"
