"""Load a bundle and run a graph: the bundle verified and its variants chosen, the tokenizer, the sessions."""
