"""``ratchet gate plan`` (what the gate's rule promotes at an eval size, simulated with the real decision code) and
``ratchet gate replay`` (re-decide a campaign's stored rounds under other gate settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ratchet.flows.cli.common import DB_HELP, cell, console, fail, plain_table

gate_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The gate: its error rates and replays.")


@gate_app.command("plan")
def plan_command(
    eval_prompts: int = typer.Option(..., "--eval-prompts", min=1, help="Held-out prompts per gated eval set."),
    samples: int = typer.Option(0, "--samples", min=0, help="k samples per prompt (gate.samples_per_prompt; 0 = greedy)."),
    discordance: Optional[float] = typer.Option(
        None, "--discordance", help="Share of prompts candidate and incumbent disagree on (default 0.2, or measured with --db)."
    ),
    db: Optional[Path] = typer.Option(None, "--db", help=DB_HELP + " Measures the discordance of its stored gate decisions."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Take [gate] from this ratchet.toml (default: defaults)."),
    trials: int = typer.Option(400, "--trials", min=10, help="Simulated rounds per true change."),
    pass_at_k: Optional[int] = typer.Option(
        None, "--pass-at-k", min=2, help="K of the pass@k guard (default: gate.pass_at_k of --config; unset: no pass@k plan)."
    ),
    pass_samples: Optional[int] = typer.Option(
        None, "--pass-samples", min=2, help="Samples per prompt for pass@k (default: eval.num_samples of --config, else K)."
    ),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Promote rates of the gate's rule for true pass@1 changes -0.10 .. +0.10 at this eval size, and the size at which
    a 5-point drop is promoted <= alpha and a 5-point gain >= 80% of the time (real decide() on simulated outcomes).
    With a pass@k guard: the share of rounds it passes a candidate that keeps pass@1 but loses pass@k."""
    from ratchet.loop.config import ConfigError, GateConfig, load_config
    from ratchet.loop.gate.error_rates import DISCORDANCE, pass_at_k_rates, plan

    if fmt not in ("table", "json"):
        fail(f"--format {fmt!r} is not one of table, json")
    try:
        full = load_config(config) if config else None
        gate = full.gate if full else GateConfig()
        pk = pass_at_k or gate.pass_at_k
        k_samples = pass_samples or (full.eval.num_samples if full and full.eval.num_samples else pk)
        p_inc, source = 0.5, "default"
        if discordance is None and db is not None:
            discordance, p_inc, source = _measured(db)
        d = DISCORDANCE if discordance is None else discordance
        if not 0 < d <= 1:
            raise ValueError(f"--discordance {d} must be in (0, 1]; e.g. --discordance 0.2")
        if samples:
            gate = gate.model_copy(update={"test": "bootstrap", "samples_per_prompt": samples})
        deltas = tuple(x for x in (round(-0.10 + 0.025 * i, 3) for i in range(9)) if abs(x) <= d)
        result = plan(gate, eval_prompts, samples=samples, discordance=d, trials=trials, deltas=deltas, p_incumbent=p_inc)
        k_rates = pass_at_k_rates(gate, eval_prompts, pk, samples=k_samples, trials=trials, p_incumbent=p_inc) if pk else None
    except (ConfigError, ValueError) as e:
        fail(str(e))
    out = {**result.as_dict(), "discordance_from": source, "incumbent_pass1": p_inc, "gate": gate.model_dump()}
    if k_rates is not None:
        out["pass_at_k"] = {"k": pk, "samples": k_samples, "pass_rate": {f"{x:+.3f}": r for x, r in k_rates.items()}}
    if fmt == "json":
        print(json.dumps(out))
        return
    t = plain_table(title=f"gate plan: {gate.rule}, margin {gate.margin}, alpha {gate.alpha}")
    for c in ("true change", "promoted"):
        t.add_column(cell(c), justify="right")
    for k, v in out["promote_rate"].items():
        t.add_row(cell(k), cell(f"{v:.1%}"))
    console.print(t)
    console.print(f"discordance {d:g} ({source}); {result.summary()}", highlight=False)
    if k_rates is not None:
        t = plain_table(title=f"pass@{pk} guard, {k_samples} samples per prompt, pass@1 unchanged")
        for c in (f"true pass@{pk} change", "passes the guard"):
            t.add_column(cell(c), justify="right")
        for x, r in k_rates.items():
            t.add_row(cell(f"{x:+.3f}"), cell(f"{r:.1%}"))
        console.print(t)


def _measured(db: Path) -> tuple[float, float, str]:
    from ratchet.store.db import StoreError, connect, require_store
    from ratchet.store.queries import measured_discordance

    if not db.is_file():
        raise StoreError(f"no store at {db}; pass the --db of a Ratchet store")
    with connect(db, read_only=True) as con:
        require_store(con, db)
        got = measured_discordance(con)
    if got is None:
        raise ValueError(f"{db} holds no gate decision with paired greedy outcomes; pass --discordance D instead")
    d, pairs, p_inc = got
    p_inc = min(max(p_inc, d / 2 + 0.01), 1 - d / 2 - 0.01)  # keep the simulated cells possible
    return d, round(p_inc, 3), f"measured on {pairs} paired prompts in {db}"


@gate_app.command("replay")
def replay_command(
    db: Path = typer.Option(..., "--db", help=DB_HELP),
    campaign: str = typer.Option(..., "--campaign", help="The campaign whose rounds to re-decide."),
    set_: Optional[list[str]] = typer.Option(
        None, "--set", help="gate.KEY=VALUE (TOML value), repeatable: e.g. gate.margin=0.0, gate.monitors.truncation_rate=0.05"
    ),
    fmt: str = typer.Option("table", "--format", help="table or json."),
) -> None:
    """Re-decide every stored round of a campaign under other [gate] settings from its stored per-prompt outcomes
    (no model calls) and show the decisions that would change."""
    from ratchet.flows.rounds.gating.gate_replay import replay, replay_json
    from ratchet.flows.rounds.state.resumed_settings import parse_set
    from ratchet.loop.config import ConfigError
    from ratchet.store.db import StoreError

    if fmt not in ("table", "json"):
        fail(f"--format {fmt!r} is not one of table, json")
    try:
        rows = replay(db, campaign, parse_set(list(set_ or [])))
    except (ConfigError, StoreError, ValueError, RuntimeError) as e:
        fail(str(e))
    if fmt == "json":
        print(replay_json(rows))
        return
    t = plain_table(title=f"gate replay: {campaign}")
    for c in ("round", "stored", "replayed", "changed", "monitors tripped", "reason (replayed)"):
        t.add_column(cell(c))
    for r in rows:
        tripped = ", ".join(r["monitors_tripped"])
        t.add_row(*map(cell, (r["round"], r["stored"], r["replayed"], "yes" if r["changed"] else "", tripped, r["reason"])))
    console.print(t)
    changed = [r["round"] for r in rows if r["changed"]]
    console.print(
        f"{len(changed)} of {len(rows)} decisions would change" + (f": rounds {changed}" if changed else ""), highlight=False
    )


def register(app: typer.Typer) -> None:
    """Add ``gate`` to the main CLI."""
    app.add_typer(gate_app, name="gate")
