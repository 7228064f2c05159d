"""Generation: sampling settings and completion records, and the backends that produce them (transformers, vLLM)."""
