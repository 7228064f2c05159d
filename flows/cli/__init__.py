"""The ``ratchet`` command line: the round and store commands (``commands``), the daemon's (``daemon_commands``)
and the recipes' (``recipe_commands``: ``audit-gold``, ``sweep``)."""

from __future__ import annotations

from ratchet.flows.cli import campaign_commands, gate_commands, tasks_commands
from ratchet.flows.cli.commands import app
from ratchet.flows.cli.daemon_commands import register
from ratchet.flows.cli.recipe_commands import register as register_recipes

register(app)
register_recipes(app)
campaign_commands.register(app)
gate_commands.register(app)
tasks_commands.register(app)


def main() -> None:
    """Entry point of the ``ratchet`` console script."""
    app()
