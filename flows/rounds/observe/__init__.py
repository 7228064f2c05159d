"""What a round shows while it runs: the run logger, progress bars, and the artifacts and tracking at its end."""
