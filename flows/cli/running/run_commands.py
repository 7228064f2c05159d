"""``ratchet demo``, ``run`` and ``check``: run (or only preflight) a campaign with progress, then its per-round table."""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ratchet.flows.cli.common import DB_HELP, cell, console, err, fail, known_errors, plain_table
from ratchet.flows.cli.inputs.model_commands import ensure_pulled
from ratchet.flows.cli.running.reporters import cli_reporter
from ratchet.flows.settings import configure_prefect


def _run(cfg, rounds: int | None = None, *, dry_run: bool = False, reset: bool = False, command: str = "ratchet run") -> None:
    """Run a campaign (at most ``rounds`` more rounds when given) with progress bars, then print the per-round table;
    ``dry_run``: every preflight check, then stop (nothing written to the store or the run dir); ``reset``: first
    retire the campaign's start in the store if it never completed a round (``ratchet.flows.rounds.reset``)."""
    from ratchet.flows.daemon.service import check_schedule, owner_alive
    from ratchet.flows.rounds.campaign import preflight, run_campaign
    from ratchet.flows.rounds.observe.progress import set_reporter
    from ratchet.flows.rounds.reset import reset_campaign
    from ratchet.flows.rounds.state.identity import with_campaign_epoch
    from ratchet.loop.campaign.round_context import save_config

    if reset and dry_run:
        fail("--reset changes the store and --dry-run writes nothing; run `ratchet run --reset` without --dry-run")
    try:
        check_schedule(cfg)  # the same config serves `ratchet up`: a bad cron fails here too, not months later
        cfg = with_campaign_epoch(cfg)  # which start of the campaign name the store holds
        if reset:
            done = reset_campaign(cfg, owner_alive)
            console.print(done or f"reset: no campaign {cfg.campaign!r} in {cfg.db}; nothing to reset", highlight=False)
            cfg = with_campaign_epoch(cfg)
        ensure_pulled(cfg.model.name_or_path, cfg.generation.teacher)  # a first run's model download, with its bar
        with console.status("checking the store, the model and the tasks…"):
            warnings = preflight(cfg, dry_run=dry_run, log_warnings=False)  # printed below, once (issue 42, finding 8)
        warnings += _pilot(cfg, f"{command}: interrupted; nothing was written" if dry_run else None)
    except known_errors() as e:
        fail(str(e))
    for w in warnings:
        err.print(f"warning: {w}", highlight=False, soft_wrap=True)
    if dry_run:
        for line in _verifier_lines(cfg):
            console.print(line, highlight=False, soft_wrap=True)
        console.print(
            f"dry run: campaign {cfg.campaign!r} passed every preflight check (store, model, tasks, lengths, disk, gate"
            f"{', pilot' if cfg.preflight.pilot else ''}); "
            f"nothing was written",
            highlight=False,
            soft_wrap=True,
        )
        return
    path = save_config(cfg)
    cols = [TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    stop = functools.partial(_stop_run, db=cfg.db)  # marks its round interrupted, its flow run Cancelled
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    # A run that is stopping (Ctrl-C, an error) may stop Prefect's log service before the engine's ranks print their
    # last lines: such a line is dropped, never printed as a logging traceback (the setting Python's docs give for
    # production use).
    logging.raiseExceptions = False
    # Prefect's flow engine takes SIGTERM first (its handler raises in the flow, logs the crash of every run on the
    # stack, then calls ours): those lines repeat what ours says, so they are dropped.
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_quiet_termination)
    try:
        with campaign_api(), Progress(*cols, console=console, transient=False, disable=not console.is_terminal) as progress:
            set_reporter(cli_reporter(progress))
            # --rounds N wins; an unlimited campaign (no max_rounds), like a scheduled run, does schedule.rounds_per_run
            if rounds is None and cfg.max_rounds is None:
                rounds = cfg.schedule.rounds_per_run
            run_campaign(path, rounds=rounds)
    except known_errors() as e:
        fail(str(e))
    finally:
        set_reporter(None)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print_rounds(cfg.db, cfg.campaign)


@contextmanager
def campaign_api() -> Iterator[str]:
    """The locked Prefect API of a one-off run (``ratchet.flows.daemon.run_server.run_api``), with a spinner while its
    server starts (when there is no server to use)."""
    from ratchet.flows.daemon.run_server import run_api

    with console.status("starting the run's Prefect server (loopback, auth string, CSRF, Host check)…") as spinner:
        with run_api() as url:
            spinner.stop()
            yield url


def _verifier_lines(cfg) -> list[str]:
    """One line per task source with its own verifier: its name in the store, its version, where it runs."""
    from ratchet.loop.campaign.round_context import Ctx
    from ratchet.loop.evaluation.scoring import source_verifiers

    return [
        f"tasks source {source!r}: verifier {v.name} version {v.version} "
        f"({'kernel sandbox' if v.sandbox else 'worker process'}; from {v.base_dir or 'the installed packages'})"
        for source, v in source_verifiers(Ctx(cfg).reward).items()
    ]


def _pilot(cfg, interrupted: str | None = None) -> list[str]:
    """Before a campaign's first round (``[preflight] pilot``; not again once a round started, e.g. to resume it):
    sample a few train prompts, print what was found, and return a warning line per problem that would waste the round.
    ``interrupted``: the line a signal prints meanwhile (a dry run has no round to resume)."""
    from ratchet.flows.rounds.campaign import stored_rounds
    from ratchet.flows.rounds.pilot import run_pilot

    if not cfg.preflight.pilot or stored_rounds(cfg, completed=False):
        return []
    handler = functools.partial(_stop_run, line=interrupted) if interrupted else _stop_run
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}  # stops its worker too
    try:
        with console.status(f"pilot: sampling {cfg.preflight.pilot_prompts} train prompt(s) with the base model…"):
            res = run_pilot(cfg)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if res is None:
        return []
    err.print(res.summary(), highlight=False, soft_wrap=True)
    return res.warnings()


STOP_GRACE_S = 8.0  # worker processes get this long to exit on SIGTERM before SIGKILL


def _quiet_termination(record: logging.LogRecord) -> bool:
    """A logging filter: False for Prefect's record of a run that a termination signal (handled by ``_stop_run``) ended."""
    return "termination signal" not in record.getMessage()


def _stop_run(signum, frame=None, line: str | None = None, db: str | None = None) -> None:
    """SIGINT/SIGTERM during ``ratchet run``: mark the round ``interrupted`` (its flow run Cancelled), stop the worker
    processes and exit at once (130 / 143) with one line.

    Nothing is lost: every stage writes its outputs atomically and commits the store in one transaction (generation
    commits its rollouts batch by batch), so the next ``ratchet run`` resumes the round at the stage that was running.
    A graceful unwind instead would wait minutes on the temporary Prefect API, which shuts down first. ``line``: what
    to say instead (a dry run's pilot: nothing to resume). ``db``: the store whose running rounds this process owns.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C while stopping changes nothing
    name = signal.Signals(signum).name
    if line is None:
        from ratchet.flows.rounds.observe.run_log import record_interruption

        rounds = record_interruption(db, name) if db else []
        what = ", ".join(f"round {r['round_index']} of campaign {r['campaign']}" for r in rounds)
        line = f"ratchet run: {name} received, stopped" + (f"; {what} is interrupted" if what else "")
        line += "; run the same command again to resume " + ("it" if what else "the round")
    err.print(line, highlight=False, soft_wrap=True)
    from ratchet.common.procs import stop_descendants

    stop_descendants(grace_s=STOP_GRACE_S)
    console.show_cursor(True)  # the progress display hid it
    os._exit(128 + signum)


def print_rounds(db: str, campaign: str) -> None:
    """The campaign's held-out pass@1 per round (base first), a promoted round's confirmed pass@1 (its confirmation
    set's, when the campaign has one), the lower confidence bound of each round's change the gate decided on, each
    gate decision and, in plain words, why."""
    from ratchet.store.db import connect
    from ratchet.store.read.reports import campaign_table

    with connect(db, read_only=True) as con:
        base, rows = campaign_table(con, campaign)
    f = lambda x, spec=".3f": "—" if x is None else format(x, spec)  # noqa: E731
    confirmed = any(r.get("confirmed_pass1") is not None for r in rows)  # a confirmation set was read (on promotion)
    t = plain_table(title=f"campaign {campaign}: held-out pass@1 (greedy)")
    cols = ["round", "candidate", "held-out pass@1", *(["confirmed"] * confirmed), "Δ vs incumbent", "Δ lower bound"]
    for c in [*cols, "trained on", "gate", "why"]:
        t.add_column(cell(c), justify="right" if c not in ("candidate", "gate", "why") else "left")
    t.add_row(*map(cell, ["base", "", f(base), *([""] * confirmed), "", "", "", "", ""]))
    for r in rows:
        values = [
            r["round_index"],
            (r["candidate_checkpoint_id"] or "—")[:12],
            f(r["candidate_pass1"]),
            *([f(r.get("confirmed_pass1")) if r["decision"] == "promote" else ""] * confirmed),
            f(r["delta"], "+.3f"),
            f(r.get("lower_bound"), "+.3f"),
            r["training_examples"],
            r["decision"] or r["status"],
            why(r),
        ]
        t.add_row(*map(cell, values))
    console.print(t)
    for r in rows:
        if r["decision"]:
            console.print(f"round {r['round_index']} {r['decision']}: {r['reason']}", highlight=False)


def why(r: dict) -> str:
    """A round's gate decision in a few plain words (the full reason is printed under the table)."""
    if not r.get("decision"):
        return ""
    if r.get("rule") != "noninferiority" or r.get("lower_bound") is None:
        return (r.get("reason") or "")[:40]
    lb, margin = r["lower_bound"], r.get("tolerance") or 0.0
    if r["decision"] == "promote":
        return "better, shown" if lb > 0 else f"shown at most {max(-lb, 0):.3f} worse"
    if "guard" in (r.get("reason") or ""):
        return "halted by a guard"
    return f"could be {-lb:.3f} worse" if lb < -margin else "worse than best promoted"


def demo(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: Optional[str] = typer.Option(
        None, help="Campaign name (a new name starts fresh); default 'demo', or 'demo-code' / 'demo-mixed' with --tasks."
    ),
    rounds: Optional[int] = typer.Option(
        None, "--rounds", min=1, help="Run at most N more rounds now (default: up to the campaign's 3); rerun to continue."
    ),
    algorithm: str = typer.Option(
        "rft", help="Training algorithm: rft (rejection-sampling fine-tuning) or grpo (GRPO-family RL, settings in [grpo])."
    ),
    tasks: str = typer.Option(
        "arithmetic",
        "--tasks",
        help="arithmetic, code (the shipped code task set), or mixed (60% arithmetic, 40% code).",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show Prefect's run logs in the terminal."),
) -> None:
    """Run 3 real improvement rounds of SmolLM2-135M-Instruct on arithmetic (or code, or both), on CPU."""
    configure_prefect(quiet_console=not verbose)
    from ratchet.loop.config import ConfigError, load_config
    from ratchet.loop.tasks.demo import DemoTasksError, demo_overrides

    try:
        name = campaign or ("demo" if tasks == "arithmetic" else f"demo-{tasks}")
        cfg = load_config(None, db=str(db), campaign=name, algorithm=algorithm, max_rounds=3, **demo_overrides(tasks))
    except (ConfigError, DemoTasksError) as e:
        fail(str(e))
    _run(cfg, rounds)


def run(
    config: Path = typer.Option(Path("ratchet.toml"), "--config", "-c", help="Campaign config (TOML)."),
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Overrides the config's db."),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="Which campaign, when the config declares several [[campaigns]]."
    ),
    rounds: Optional[int] = typer.Option(
        None, "--rounds", min=1, help="Run at most N more rounds now; max_rounds stays the campaign's total."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Run every preflight check and stop: nothing is written to the store or the run dir."
    ),
    reset: bool = typer.Option(
        False,
        "--reset",
        help="Drop the campaign's start in the store first if it never completed a round (e.g. an interrupted trial), "
        "so an edited config starts it afresh; refused once a round completed.",
    ),
) -> None:
    """Run the campaign a config file describes (resumes where it stopped)."""
    configure_prefect(quiet_console=not verbose)
    _run(_load_run_config(config, db, campaign), rounds, dry_run=dry_run, reset=reset)


def check(
    config: Path = typer.Option(Path("ratchet.toml"), "--config", "-c", help="Campaign config (TOML)."),
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Overrides the config's db."),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="Which campaign, when the config declares several [[campaigns]]."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Check a campaign config without starting a round: the same as `ratchet run --dry-run` (nothing is written)."""
    configure_prefect(quiet_console=not verbose)
    _run(_load_run_config(config, db, campaign), dry_run=True, command="ratchet check")


def eval_model(
    model: str = typer.Option(
        "smollm2-135m-instruct",
        "--model",
        help="A local checkpoint folder, the smollm2-135m-instruct alias, or a stored checkpoint's id (with --db).",
    ),
    tasks: Optional[Path] = typer.Option(
        None,
        "--tasks",
        help="A task file in any format `ratchet init --tasks` reads (format detected). Without it: --config's [[evals]].",
    ),
    prompts: Optional[int] = typer.Option(None, "--prompts", min=1, help="Evaluate the file's first N prompts (default: all)."),
    samples: int = typer.Option(0, "--samples", min=0, max=256, help="Also sample K completions per prompt: unbiased pass@k."),
    fewshot: int = typer.Option(
        2, "--fewshot", min=0, max=8, help="Worked examples before each question, as `init` writes them."
    ),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Generation cap (default: the config's)."),
    system_prompt: Optional[str] = typer.Option(None, "--system-prompt", help="The system message (default: the format's)."),
    verifier: Optional[str] = typer.Option(
        None, "--verifier", help="A records file's verifier, module:function (from the current folder first) or an entry point."
    ),
    environment: Optional[str] = typer.Option(
        None, "--environment", help="A multi-turn environment ('python', or module:Class)."
    ),
    max_turns: Optional[int] = typer.Option(None, "--max-turns", min=1, max=32, help="Assistant turns per episode at most."),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="A campaign config whose generation, verifier and compute settings to use."
    ),
    db: Optional[Path] = typer.Option(
        None, "--db", help="Store the evaluation (trajectories, verdicts, evaluations) in this DuckDB store, to query later."
    ),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="The evaluation-only campaign it is stored under (default: eval-<task file stem>)."
    ),
    format: str = typer.Option("table", "--format", help="table | json (one line per set: pass@1, ci95, prompts, ...)"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Evaluate a model on a task file without a campaign: greedy pass@1 with its 95% interval (and pass@k with --samples).

    The prompts are rendered and verified as a round of a campaign over that file would. Nothing is written unless
    --db is given: the evaluation is then a round of an evaluation-only campaign (`ratchet sql` reads it)."""
    from ratchet.flows.rounds.eval_store import default_campaign
    from ratchet.flows.rounds.model_eval import evaluate_model

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if tasks is None and config is None:
        fail("pass --tasks FILE (a task file), or --config CONFIG to evaluate its [[evals]] (or its held-out split)")
    configure_prefect(quiet_console=not verbose)
    base = _load_run_config(config, None, None) if config is not None else None
    targets = [(None, tasks, prompts, system_prompt, {}, False)] if tasks is not None else _eval_targets(base, prompts)
    plugins = {"verifier": verifier, "environment": environment, "max_turns": max_turns}
    try:
        ensure_pulled(model)  # on stderr: --format json prints one line on stdout
        for name, path, n, system, lent, heldout_only in targets:
            with console.status(f"evaluating {model} on {name or path}…"):
                res = evaluate_model(
                    model,
                    path,
                    base=base,
                    prompts=n,
                    samples=samples,
                    fewshot=fewshot,
                    max_new_tokens=max_new_tokens,
                    system_prompt=system,
                    plugins={**lent, **{k: v for k, v in plugins.items() if v is not None}},
                    store=(db, campaign or (default_campaign(tasks) if tasks else f"eval-{base.campaign}")) if db else None,
                    heldout_only=heldout_only,
                )
            _show_eval(res, name, format)
    except known_errors() as e:
        fail(str(e))
    except (ValueError, LookupError) as e:  # a checkpoint id the store lacks (or without weights); a training campaign
        fail(str(e))


def _eval_targets(cfg, prompts: int | None) -> list[tuple]:
    """``(set name, path, prompts, system prompt, source fields, held-out only)`` per ``[[evals]]`` entry of
    ``cfg`` (a source's entry: that source's held-out split), or per task source's held-out split without any."""
    sources = {s.source_name(): s for s in cfg.tasks.sources}
    if not cfg.evals:
        return [(name, Path(s.path), prompts or cfg.tasks.heldout_prompts, None, {}, True) for name, s in sources.items()]
    out = []
    for e in cfg.evals:
        if e.file is not None:
            lent = e.file.model_dump(exclude_none=True, exclude={"path"})
            out.append((e.name, Path(e.file.path), prompts or e.prompts, e.system_prompt, lent, False))
        else:
            s = sources[e.source]
            out.append((e.name, Path(s.path), prompts or e.prompts or cfg.tasks.heldout_prompts, e.system_prompt, {}, True))
    return out


def _show_eval(res, name: str | None, format: str) -> None:
    """One JSON line (``eval_set`` added for a config's set), or a table."""
    if format == "json":
        print(json.dumps({**({"eval_set": name} if name else {}), **res.to_json()}))
        return
    t = plain_table(title=f"{res.model} on {name or res.tasks} ({res.format}, {res.prompts} prompts)")
    for c in ("metric", "value", "95% interval"):
        t.add_column(cell(c))
    t.add_row("pass@1 (greedy)", f"{res.pass1:.3f} ({res.correct}/{res.prompts})", f"[{res.ci95[0]:.3f}, {res.ci95[1]:.3f}]")
    for k, v in res.pass_at_k.items():
        t.add_row(f"pass@{k} ({res.samples} samples, unbiased)", f"{v:.3f}", "")
    t.add_row("greedy verdicts", ", ".join(f"{r} {n}" for r, n in res.reasons.items()), "")
    t.add_row("time", f"{res.seconds:.0f} s, {res.completion_tokens} tokens generated", "")
    if res.round_id:
        t.add_row("stored", f"round {res.round_id} (`ratchet sql` reads it)", "")
    console.print(t)


def _load_run_config(config: Path, db: Path | None, campaign: str | None):
    """The campaign config ``ratchet run`` and ``ratchet check`` take (exit 2 with the config's errors)."""
    from ratchet.loop.config import ConfigError, load_config

    try:
        return load_config(config, db=str(db) if db else None, campaign=campaign)
    except ConfigError as e:
        fail(str(e))


def register(app: typer.Typer) -> None:
    """Add ``demo``, ``run``, ``check`` and ``eval`` to the main CLI."""
    app.command("demo")(demo)
    app.command("run")(run)
    app.command("check")(check)
    app.command("eval")(eval_model)
