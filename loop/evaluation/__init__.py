"""Evaluation: scoring completions with their verifier, held-out metrics (pass@1, pass@k, maj@k) and the gate."""
