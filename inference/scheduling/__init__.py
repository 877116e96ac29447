"""Admit, queue, batch and reuse: admission, the fair queue, the batcher, the run slots, the answer cache."""
