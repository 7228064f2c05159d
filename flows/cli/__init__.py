"""The ``ratchet`` command line: the round and store commands (``commands``) and the daemon's (``daemon_commands``)."""

from __future__ import annotations

from ratchet.flows.cli import campaign_commands
from ratchet.flows.cli.commands import app
from ratchet.flows.cli.daemon_commands import register

register(app)
campaign_commands.register(app)


def main() -> None:
    """Entry point of the ``ratchet`` console script."""
    app()
