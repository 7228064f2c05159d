"""The gate's inputs (paired per-set scores), the sequential gate's evaluation, and replay of past decisions."""
