"""Campaign state a round reads and keeps: its identity and recorded settings, phases, re-verification, the prompts it picks."""
