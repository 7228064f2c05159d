"""``ratchet gate replay``: re-decide every stored round of a campaign under another ``[gate]`` from the stored
per-prompt outcomes (no model calls), to tune the gate on a campaign's history.

Each round is re-decided on its own stored pair (incumbent, candidate), with the verdicts and eval set that decision
compared, the best promoted checkpoints and the rejections in a row as they stood when it decided (so with the
stored settings it reproduces the stored decision). A later round is not re-run on another incumbent: the candidates
it would have trained do not exist.
"""

from __future__ import annotations

import json
from pathlib import Path

from ratchet.flows.rounds.gating.gate_inputs import Grouping, decide_stored, stored_gate_config, training_guards
from ratchet.flows.rounds.gating.monitor_inputs import measure_stored, stored_cross_check
from ratchet.loop.config import ConfigError, GateConfig
from ratchet.loop.gate.monitors import Monitor, tripped_reasons
from ratchet.store.db import StoreError, connect, require_store
from ratchet.store.queries import (
    campaign_by_name,
    campaign_state,
    decision_inputs,
    gate_history,
    pinned_eval_prompts,
)
from ratchet.store.read.reports import training_metrics
from ratchet.store.read.round_metrics import gate_set_rows


def gate_overrides(changes: dict[str, object]) -> dict[str, object]:
    """``{"gate.margin": 0.0}`` -> ``{"margin": 0.0}``.

    Raises:
        ConfigError: a key outside ``gate.``.
    """
    bad = [k for k in changes if not k.startswith("gate.") or not (k.count(".") == 1 or k.startswith("gate.monitors."))]
    if bad:
        raise ConfigError(
            f"--set {', '.join(bad)}: replay changes [gate] settings only, e.g. --set gate.margin=0.0 or "
            "--set gate.monitors.truncation_rate=0.05"
        )
    return {k.removeprefix("gate."): v for k, v in changes.items()}


def _with(cfg: GateConfig, over: dict[str, object]) -> GateConfig:
    merged = cfg.model_dump()
    for k, v in over.items():  # "monitors.truncation_rate" sets one key of the [gate.monitors] table
        *path, last = k.split(".")
        at = merged
        for p in path:
            at = at.setdefault(p, {})
        at[last] = v
    try:
        return GateConfig.model_validate(merged)
    except ValueError as e:
        raise ConfigError(f"--set {over}: {str(e).splitlines()[-1] if str(e) else e}") from None


def replay(db: str | Path, campaign: str, changes: dict[str, object] | None = None) -> list[dict]:
    """One row per stored gate decision: ``{round, stored, replayed, changed, stored_reason, reason, settings,
    monitors_tripped}`` (the names of the monitors that trip under the replayed thresholds: a backtest of
    ``[gate.monitors]``, e.g. ``--set gate.monitors.length_p90_ratio=1.3``).

    Raises:
        StoreError: no store at ``db``; ConfigError: an unknown campaign or a bad ``--set``.
    """
    over = gate_overrides(changes or {})
    if not Path(db).is_file():
        raise StoreError(f"no store at {db}; pass the --db of a Ratchet store")
    out = []
    with connect(db, read_only=True) as con:
        require_store(con, Path(db))
        c = campaign_by_name(con, campaign)
        if c is None:
            names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY name").fetchall()]
            raise ConfigError(f"no campaign {campaign!r} in {db}; campaigns: {', '.join(names) or 'none'}")
        settings = c["config"]
        grouping = Grouping.of(settings)
        grpo = settings.get("grpo") or {}
        pinned = len(pinned_eval_prompts(con, c["campaign_id"]))
        for row in gate_history(con, campaign):
            g = _with(stored_gate_config(row), over)
            base = {
                "round": row["round_index"],
                "stored": row["decision"],
                "stored_reason": row["reason"],
                "settings": g.model_dump(),
            }
            inputs = decision_inputs(con, row) if row["candidate_checkpoint_id"] else None
            if inputs is None:  # no candidate (nothing to train on): decided without outcomes, replayed as stored
                out.append(
                    {**base, "replayed": row["decision"], "changed": False, "reason": row["reason"], "monitors_tripped": []}
                )
                continue
            es, version = inputs
            state = campaign_state(con, c["campaign_id"], es, before_round_index=row["round_index"])
            # decided before per-set gating (no recorded settings): one pooled set, as it was then
            pooled = grouping if row.get("settings_json") else Grouping({}, False)
            # roles are run settings (not in the stored campaign settings): each set's role as that decision used it
            roles = {r["eval_name"]: r["role"] for r in gate_set_rows(con, row["round_id"])}
            pooled = Grouping({**pooled.roles, **roles}, pooled.by_source) if roles and pooled.roles else pooled
            guards = training_guards(
                training_metrics(con, row["round_id"]), settings.get("algorithm", "rft"),
                grpo.get("max_kl", 0.5), grpo.get("min_entropy", 0.01), grpo.get("max_sampler_gap"),
            )  # fmt: skip
            monitors = _monitors(con, row, es, version, g, settings)
            res = decide_stored(
                con, pooled, c["campaign_id"], row["round_index"], es, row["incumbent_checkpoint_id"],
                row["candidate_checkpoint_id"], version, g, consecutive_rejections=state.consecutive_rejections,
                tripped_guards=guards + tripped_reasons(monitors), pinned=pinned,
            ).gate  # fmt: skip
            out.append(
                {**base, "replayed": res.decision, "changed": res.decision != row["decision"], "reason": res.reason,
                 "monitors_tripped": [m.name for m in monitors if m.tripped]}
            )  # fmt: skip
    return out


def _monitors(con, row: dict, es: str, version: str, g: GateConfig, settings: dict) -> list[Monitor]:
    """The round's monitors under ``g.monitors``, measured again from its stored completions; the cross-check is the
    stored measurement re-thresholded (replay does not run the second verifier again)."""
    language = (settings.get("verifier") or {}).get("target_language", "none")
    ms = measure_stored(con, es, row["incumbent_checkpoint_id"], row["candidate_checkpoint_id"], version, g.monitors,
                        target_language=language)  # fmt: skip
    cross = stored_cross_check(con, row["round_id"], g.monitors)
    return ms + ([cross] if cross else [])


def replay_json(rows: list[dict]) -> str:
    return json.dumps({"rounds": rows, "changed": [r["round"] for r in rows if r["changed"]]})
