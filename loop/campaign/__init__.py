"""A campaign's rounds: what a stage derives from its round (context), curriculum stages, the round manifest and sweeps."""
