"""Engine adapters: kvtier.integrations.transformers."""
