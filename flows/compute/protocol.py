"""What an engine rank prints for its parent (progress lines on stdout) and the errors a rank's failure raises.

Imports neither torch nor Prefect (the rank imports it before loading a model).
"""

from __future__ import annotations


class StageTimeout(TimeoutError):
    """An engine rank ran past its configured wall-clock limit and was killed."""


class WorkerFailed(RuntimeError):
    """An engine rank died or a request failed; the message quotes the end of its output (or the error)."""


PROGRESS_PREFIX = "@ratchet-progress "  # a stdout line starting with this is JSON {"bar", "done", "total"}
