"""Engine adapters: kvtier.integrations.transformers and kvtier.integrations.vllm, with
kvtier.integrations.load_cost, their load-or-recompute decision."""
