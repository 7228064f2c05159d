"""A campaign's rounds: what a stage derives from its round (context), curriculum phases, the round manifest and sweeps."""
