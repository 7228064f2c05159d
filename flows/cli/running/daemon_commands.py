"""The daemon's commands: ``ratchet up``, ``ratchet init``, ``ratchet schedule list|pause|resume|run-now``.

Registered on the main app by ``ratchet.flows.cli`` (``register``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import cell, console, fail, known_errors, plain_table
from ratchet.flows.settings import configure_prefect

schedule_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Campaign schedules of the running `ratchet up`.")


def up(
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        "-c",
        help="Config (TOML) with one or more campaigns; default: ./ratchet.toml if present, else the demo campaign.",
    ),
    port: Optional[int] = typer.Option(
        None, "--port", help="Port of the Prefect API and UI (default: the config's prefect.port, 4200)."
    ),
    interval_s: Optional[float] = typer.Option(
        None, "--interval-s", help="Run every campaign every N seconds instead of its schedule (for trials)."
    ),
    work_pool: Optional[str] = typer.Option(
        None,
        "--work-pool",
        help="Deploy every campaign to this Prefect work pool (created as a 'process' pool when absent) instead of "
        "running its rounds here; `prefect worker start --pool NAME` runs them (docs/daemon.md#work-pools).",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Prefect's run logs in the terminal."),
) -> None:
    """Start the Prefect server (or use PREFECT_API_URL) and serve every campaign on its schedule until Ctrl-C / SIGTERM
    (or, with a work pool, schedule them for the pool's workers)."""
    configure_prefect(quiet_console=not verbose)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.getLogger("ratchet").addHandler(handler)  # the daemon's own messages; Prefect's go to its console handler
    logging.getLogger("ratchet").setLevel(logging.INFO)
    logging.getLogger("ratchet").propagate = False  # Prefect's root console handler would print them twice
    from ratchet.flows.daemon.server import ServerError
    from ratchet.flows.daemon.service import DaemonError, run_daemon
    from ratchet.loop.config import load_daemon_config

    if config is None and Path("ratchet.toml").is_file():
        config = Path("ratchet.toml")
    try:
        dcfg = load_daemon_config(config, interval_s=interval_s, work_pool=work_pool)
        if port is not None:
            dcfg = dcfg.model_copy(update={"prefect": dcfg.prefect.model_copy(update={"port": port})})

        own_server = not os.environ.get("PREFECT_API_URL")  # else that server's auth is its owner's business

        def ready(url: str) -> None:
            names = ", ".join(c.campaign for c in dcfg.campaigns)
            from ratchet.flows.daemon.api import auth_path
            from ratchet.flows.daemon.schedules import state_path

            console.print(
                f"ratchet up: Prefect UI at {url.removesuffix('/api')}  ·  serving {names}  ·  Ctrl-C to stop",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
            for pool in dict.fromkeys(c.schedule.work_pool for c in dcfg.campaigns if c.schedule.work_pool):
                console.print(
                    f"ratchet up: rounds on work pool {pool} run where a worker runs: PREFECT_API_URL={url} "
                    f"PREFECT_API_AUTH_STRING=<the UI's password> prefect worker start --pool {pool} (docs/daemon.md#work-pools)",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )
            if own_server:
                console.print(
                    f"ratchet up: the UI asks for a password: paste the contents of {auth_path(state_path().parent)}",
                    highlight=False,
                    soft_wrap=True,
                    markup=False,
                )

        stopped_by = run_daemon(dcfg, on_ready=ready)
    except (DaemonError, ServerError, *known_errors()) as e:
        fail(str(e))
    except KeyboardInterrupt:
        console.print("ratchet up: interrupted before serving; stopped")
        raise typer.Exit(130)
    console.print(f"ratchet up: stopped ({stopped_by or 'runner exited'}); no flow run left running", highlight=False)


def init(
    path: Path = typer.Option(Path("ratchet.toml"), "--path", help="Where to write the config."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing file."),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
        help="Write a ready campaign instead of the defaults: 'r1' = the DeepSeek-R1 pipeline in four [[phases]] "
        "(cold-start sft -> reasoning grpo with a language reward -> rft + general SFT data -> grpo for all scenarios).",
    ),
    tasks: Optional[list[Path]] = typer.Option(
        None,
        "--tasks",
        help="Your task file(s): write a campaign with one [[tasks.sources]] per file (format detected, its system "
        "prompt, worked few-shot examples from the file, max_new_tokens = 'auto', a held-out size). More files may "
        "follow: --tasks a.jsonl b.jsonl.",
    ),
    more: Optional[list[Path]] = typer.Argument(None, hidden=True, help="More task files after --tasks FILE."),
    verifier: Optional[str] = typer.Option(
        None,
        "--verifier",
        help="Your own verifier for a records file (a prompt and any fields): 'package.module:function' next to the "
        "config, or an entry point of ratchet.verifiers (docs/own-task.md). With several --tasks files it judges "
        "those whose fields match no built-in format.",
    ),
) -> None:
    """Write a complete, commented ratchet.toml: every key with its default (the demo campaign), a recipe, or a
    campaign over your own task files (--tasks)."""
    from ratchet.common.output import OutputRefused, check_output, write_output
    from ratchet.loop.config.template import RECIPES, render_default_toml, render_recipe
    from ratchet.loop.tasks.formats import TaskDataError
    from ratchet.loop.tasks.starter import starter_config
    from ratchet.verifiers.plugins import PluginError

    files = [*(tasks or []), *(more or [])]
    if more and not tasks:
        fail(f"unexpected argument {more[0]}; task files go after --tasks: ratchet init --tasks {more[0]}")
    if recipe is not None and recipe not in RECIPES:
        fail(f"--recipe {recipe!r} is unknown; recipes: {', '.join(RECIPES)}")
    if recipe is not None and files:
        fail("--recipe and --tasks are exclusive; pass one of them")
    if verifier is not None and not files:
        fail("--verifier judges your task files; pass them too: ratchet init --tasks FILE --verifier module:function")
    if path.is_dir():
        fail(f"{path} is a directory; pass --path FILE.toml")
    if path.exists() and not force:
        fail(f"{path} already exists; pass --force to overwrite it, or --path OTHER.toml")
    extra: dict[Path, str] = {}
    notes: list[str] = []
    try:
        check_output(path, force=force, option="--path")
        if files:
            text, extra, notes = starter_config(files, path, verifier=verifier)
        else:
            text = render_recipe(recipe) if recipe else render_default_toml()
        for p, content in extra.items():
            write_output(p, content, force=True, option="the few-shot file")  # named after the config: replaced with it
        write_output(path, text, force=force, option="--path")  # a crash or full disk never leaves half a config behind
    except (TaskDataError, OutputRefused, PluginError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write {path} ({e.strerror}); pass a writable --path")
    for p in extra:
        console.print(f"wrote {p} (worked few-shot examples from your file)", highlight=False)
    for line in notes:  # what init chose and why (the held-out size, from the gate's plan)
        console.print(line, highlight=False, soft_wrap=True)
    console.print(
        f"wrote {path}; edit it, then `ratchet run --config {path}` or `ratchet up --config {path}`",
        highlight=False,
        soft_wrap=True,
    )


def _with_client(fn):
    configure_prefect()
    from ratchet.flows.daemon.schedules import ScheduleError, daemon_client

    try:
        with daemon_client() as client:
            return fn(client)
    except ScheduleError as e:
        fail(str(e))


@schedule_app.command("list")
def schedule_list(format: str = typer.Option("table", "--format", help="table | json")) -> None:
    """Served campaigns, their schedules, whether active, and the next run."""
    from ratchet.flows.daemon.schedules import schedule_rows

    rows = _with_client(schedule_rows)
    if format == "json":
        print(json.dumps(rows, indent=1))
        return
    t = plain_table("campaign", "schedule", "active", "next run")
    for r in rows:
        t.add_row(*map(cell, [r["campaign"], r["schedule"], "yes" if r["active"] else "paused", r["next_run"] or "—"]))
    console.print(t)


@schedule_app.command("pause")
def schedule_pause(campaign: str = typer.Argument(..., help="Campaign name (see `ratchet schedule list`).")) -> None:
    """Pause a campaign's schedule (until `ratchet schedule resume` or the daemon restarts with active = true)."""
    from ratchet.flows.daemon.schedules import set_paused

    _with_client(lambda c: set_paused(c, campaign, True))
    console.print(f"paused {campaign}")


@schedule_app.command("resume")
def schedule_resume(campaign: str = typer.Argument(..., help="Campaign name.")) -> None:
    """Resume a paused campaign schedule."""
    from ratchet.flows.daemon.schedules import set_paused

    _with_client(lambda c: set_paused(c, campaign, False))
    console.print(f"resumed {campaign}")


@schedule_app.command("run-now")
def schedule_run_now(campaign: str = typer.Argument(..., help="Campaign name.")) -> None:
    """Start a run of the campaign now (the daemon picks it up within ~10 s)."""
    from ratchet.flows.daemon.schedules import daemon_api_url, run_now

    run_id = _with_client(lambda c: run_now(c, campaign))
    ui = (daemon_api_url() or "").removesuffix("/api")
    console.print(f"started {campaign}: flow run {run_id}  {ui}/runs/flow-run/{run_id}", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``up``, ``init`` and ``schedule`` to the main CLI."""
    app.command("up")(up)
    app.command("init")(init)
    app.add_typer(schedule_app, name="schedule")
