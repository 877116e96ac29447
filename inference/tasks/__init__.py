"""What a request asks for: one module per task, each over `inference.served.ServedModel`."""
