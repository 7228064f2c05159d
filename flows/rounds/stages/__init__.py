"""The round's stages (Prefect tasks in ``stage_frame`` blocks), its one engine and its step loop."""
