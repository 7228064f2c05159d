"""The ``ratchet`` command line: the round and store commands (``commands``), the daemon's (``daemon_commands``)
and the recipes' (``recipe_commands``: ``audit-gold``, ``sweep``)."""

from __future__ import annotations

from ratchet.flows.cli import campaign_commands, gate_commands, tasks_commands
from ratchet.flows.cli.commands import app
from ratchet.flows.cli.daemon_commands import register
from ratchet.flows.cli.recipe_commands import register as register_recipes
from ratchet.flows.cli.sql_command import sql
from ratchet.flows.cli.track_command import track

register(app)
register_recipes(app)
campaign_commands.register(app)
gate_commands.register(app)
app.command("track")(track)
app.command("sql")(sql)
tasks_commands.register(app)


def main() -> None:
    """Entry point of the ``ratchet`` console script.

    Files it creates are private (umask 077) unless ``RATCHET_FILE_MODE=group``; a campaign's flow and ``ratchet up``
    then apply the config's ``[service] file_mode`` (``ratchet.common.files.FILE_MODES``).
    """
    import os
    import sys

    from ratchet.common.files import set_file_mode

    try:
        set_file_mode(os.environ.get("RATCHET_FILE_MODE", "private"))
    except ValueError as e:
        print(f"error: RATCHET_FILE_MODE: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    app()
