"""The commands that run campaigns: ``demo``, ``run``, ``check`` (with their progress reporters), the daemon's
``up``, ``init`` and ``schedule``, ``campaign halt|pause|resume``, ``sweep`` and ``audit-gold``."""
