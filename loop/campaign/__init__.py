"""A campaign's rounds: what a stage derives from its round (round_context), curriculum phases, the round manifest and sweeps."""
