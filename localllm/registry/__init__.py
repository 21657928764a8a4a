"""The model registry: names, the blob/manifest store, GGUF headers, catalog and pull."""
