"""The ``ratchet`` app: each command group lives in its own module beside this one and is wired here, in the order
``ratchet --help`` lists them."""

from __future__ import annotations

import typer

from ratchet.flows.cli import (
    campaign_commands,
    daemon_commands,
    gate_commands,
    model_commands,
    recipe_commands,
    run_commands,
    tasks_commands,
    verifier_commands,
)
from ratchet.flows.cli.report_command import report
from ratchet.flows.cli.sql_command import sql
from ratchet.flows.cli.status_command import status
from ratchet.flows.cli.track_command import publish, track

# rich_markup_mode=None: help text is plain (`[grpo]`, `[[campaigns]]` are TOML, not markup)
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Ratchet: verifiable self-improvement rounds for LLMs.",
)
model_commands.register(app)
run_commands.register(app)  # demo, run, check
app.command("status")(status)
app.command("report")(report)
verifier_commands.register(app)  # reverify, audit
daemon_commands.register(app)  # up, init, schedule
recipe_commands.register(app)  # audit-gold, sweep
campaign_commands.register(app)  # campaign, export, gc
gate_commands.register(app)
app.command("track")(track)
app.command("publish")(publish)
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
