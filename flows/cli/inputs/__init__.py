"""The commands about what a campaign is made of: ``model pull`` (the base weights), ``tasks check`` (a task file
through its loader and verifier), ``reverify`` and ``audit`` (the verifiers)."""
