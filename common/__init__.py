"""Mechanisms every layer shares (atomic files, process trees, seeds); imports nothing else from Ratchet."""
