"""The Open Inference Protocol v2 (KServe / Triton REST): its schemas, its wire codec (JSON and the binary
tensor data extension), the adapter from its tensors to core calls, and its routes."""
