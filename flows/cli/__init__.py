"""The ``ratchet`` command line: ``commands`` wires the app from one module per command group beside it
(``run_commands``: demo, run, check; ``status_command``; ``daemon_commands``: up, init, schedule; ...)."""

from __future__ import annotations

from ratchet.flows.cli.commands import app, main

__all__ = ["app", "main"]
