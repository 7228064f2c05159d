"""The ``ratchet`` app: each command group lives in its own module (``running``, ``reading`` and ``inputs``
packages beside this one) and is wired here, in the order ``ratchet --help`` lists them."""

from __future__ import annotations

import typer

from ratchet.flows.cli.inputs import model_commands, tasks_commands, verifier_commands
from ratchet.flows.cli.reading import gate_commands
from ratchet.flows.cli.reading.report_command import report
from ratchet.flows.cli.reading.sql_command import sql
from ratchet.flows.cli.reading.status_command import status
from ratchet.flows.cli.reading.track_command import publish, track
from ratchet.flows.cli.running import campaign_commands, daemon_commands, recipe_commands, run_commands

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

# `ratchet --help` lists each command on one line: click cuts a docstring's first sentence at the terminal's width
# (issue 42, finding 12), so each gets a summary that fits an 80-column terminal whole (at most 60 characters).
SHORT_HELP = {
    "demo": "3 real rounds of SmolLM2-135M-Instruct on arithmetic, on CPU",
    "run": "Run a campaign from its config (resumes where it stopped)",
    "check": "Every preflight check of a campaign; nothing is written",
    "eval": "A model's pass@1 on a task file, without a campaign",
    "status": "Campaigns, their rounds, states and gate decisions",
    "report": "One self-contained HTML page of a store's campaigns",
    "reverify": "Re-score stored trajectories with the current verifier",
    "audit": "Run the verifiers over labelled cases (false positives)",
    "up": "Serve every campaign on its schedule (the daemon)",
    "init": "Write a ratchet.toml: defaults, a recipe or your task files",
    "audit-gold": "Prompts whose gold the samples' consensus disputes",
    "sweep": "One campaign per grid point, compared in one table",
    "export": "Rows with the chat the model saw, or a model folder",
    "gc": "Apply the retention policy to the store's checkpoints",
    "track": "Write gated rounds to MLflow, TensorBoard or W&B",
    "publish": "A checkpoint to an MLflow model registry or the Hub",
    "sql": "Query the store, read-only",
}
for _cmd in app.registered_commands:
    _cmd.short_help = SHORT_HELP.get(_cmd.name or "", _cmd.short_help)


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
