"""The ``improvement_round`` and ``campaign`` Prefect flows, and the tasks that open and close a round."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

from ratchet.common.files import file_mode
from ratchet.flows.rounds.gating.confirmation import confirm
from ratchet.flows.rounds.gating.gate_inputs import (
    Grouping,
    base_pass1,
    decide_stored,
    decision_columns,
    pass_at_k_columns,
    scores,
    training_guards,
)
from ratchet.flows.rounds.gating.monitor_inputs import measure_stored, monitor_rows
from ratchet.flows.rounds.gating.refresh import refresh_eval_set
from ratchet.flows.rounds.gating.sequential_eval import evaluate_sequentially, sequential_warning
from ratchet.flows.rounds.observe.closing import apply_retention, publish_promoted, publish_round, track_round
from ratchet.flows.rounds.observe.run_log import current_flow_run_id, process_owner, run_logger
from ratchet.flows.rounds.stages.pipeline import evaluate, prompt_rows
from ratchet.flows.rounds.stages.round_engine import check_weight_sync, round_engine
from ratchet.flows.rounds.stages.steps import round_steps
from ratchet.flows.rounds.state.identity import check_checkpoints, check_same_settings, with_campaign_epoch
from ratchet.flows.rounds.state.night_budget import BudgetSpent, NightBudget
from ratchet.flows.rounds.state.phases import check_training_data, phase_contexts, register_teacher
from ratchet.flows.rounds.state.resumed_settings import apply_recorded_settings
from ratchet.flows.rounds.state.reverify import carry_over_promoted
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, pin_eval_prompts, read_marker, save_config
from ratchet.loop.campaign.round_manifest import chat_template_of, round_manifest
from ratchet.loop.checkpoints import check_loadable, read_checkpoint_id, resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.evaluation.scoring import verifier_versions
from ratchet.loop.gate import error_rates as gate_plan
from ratchet.loop.gate.eval_sets import pooled
from ratchet.loop.gate.monitors import tripped_reasons
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.db import connect, init_db, require_store, transaction
from ratchet.store.ingest import insert_rows
from ratchet.store.queries import (
    campaign_by_name,
    campaign_state,
    claim_round,
    eval_outcomes,
    gate_decision,
    last_evaluated_prompts,
    pinned_eval_prompts,
    round_incumbent,
    set_round_status,
)
from ratchet.store.read.reports import training_metrics
from ratchet.store.retention import check_free_disk, round_write_bytes
from ratchet.verifiers.cross_check import check_available


def preflight(cfg: RatchetConfig, *, dry_run: bool = False, log_warnings: bool = True) -> list[str]:
    """Check what a campaign needs before any flow starts, so bad input fails fast in one line.

    Returns warnings (one line each): e.g. an eval set too small to detect a 5-point drop at ``gate.alpha``.
    ``dry_run``: the same checks, writing nothing (no store is created; an existing one is only read).
    ``log_warnings``: also log them (the daemon's only output); a caller that prints them itself passes False.

    Raises:
        StoreError, ModelError, TaskDataError, CampaignConflict: with what is wrong and the fix.
        ValueError: ``verifier.cross_check`` names a verifier that is not installed.
        ConfigError: sequence limits that would truncate training (``sft.max_seq_len`` vs the longest prompt +
            ``max_new_tokens``; see ``ratchet.loop.train.lengths``).
    """
    ctx = Ctx(cfg)
    model_dir = resolve_model(cfg.model.name_or_path)
    check_loadable(model_dir)
    for sctx in phase_contexts(cfg):  # the campaign itself, or each [[phases]] entry with its effective config
        check_training_data(sctx, model_dir)
    if not dry_run:
        init_db(ctx.db)  # last: a failing check above leaves no store behind
    if not dry_run or Path(ctx.db).exists():
        with connect(ctx.db, read_only=True) as con:
            require_store(con, ctx.db)
            check_same_settings(con, cfg)
            check_checkpoints(con, ctx)
    check_round_disk(ctx)
    check_weight_sync(cfg, model_dir)
    k = cfg.gate.samples_per_prompt
    if k > cfg.eval.num_samples:
        raise ValueError(f"gate.samples_per_prompt={k} > eval.num_samples={cfg.eval.num_samples}; set eval.num_samples >= {k}")
    if cfg.verifier.cross_check:
        check_available(cfg.verifier.cross_check)  # the gate's second verifier must be installed before round 1
    name, size = smallest_gating_set(ctx)
    warning = gate_warning(cfg, size, name) if not cfg.gate.sequential else sequential_warning(cfg, len(ctx.heldout()))
    if warning and log_warnings:
        logging.getLogger(__name__).warning("campaign %s: %s", cfg.campaign, warning)
    return [warning] if warning else []


def stored_rounds(cfg: RatchetConfig, *, completed: bool = True) -> int:
    """How many rounds of ``cfg``'s campaign its store holds (``completed``: only completed ones; 0 without a store or
    such a campaign)."""
    if not Path(cfg.db).exists():
        return 0
    with connect(cfg.db, read_only=True) as con:
        require_store(con, Path(cfg.db))
        existing = campaign_by_name(con, cfg.campaign)
        if existing is None:
            return 0
        sql = "SELECT count(*) FROM rounds WHERE campaign_id = ?" + (" AND status = 'completed'" if completed else "")
        return con.execute(sql, [existing["campaign_id"]]).fetchone()[0]


def smallest_gating_set(ctx: Ctx) -> tuple[str, int]:
    """``(name, prompts)`` of the smallest eval set the gate decides on: an ``[[evals]]`` entry with role 'gate', a
    task source's share of the held-out set (several sources), or the whole held-out set."""
    cfg = ctx.cfg
    if cfg.evals:
        gating = {e.name for e in cfg.evals if e.role == "gate"}
        sizes = {name: len(ps) for name, ps in ctx.tasks.eval_sets(cfg) if name in gating}
    elif len(cfg.tasks.sources) > 1:
        sizes = dict(Counter(p.source for p in ctx.heldout()))
    else:
        sizes = {"heldout": len(ctx.heldout())}
    return min(sizes.items(), key=lambda kv: kv[1])


def gate_warning(cfg: RatchetConfig, n_prompts: int, set_name: str = "heldout") -> str | None:
    """One line when the gate's rule, simulated at this eval size (``ratchet gate plan``), promotes a 5-point drop more
    often than alpha or a 5-point gain less than 80% of the time; it names the size that would; else None."""
    g = cfg.gate
    kw = dict(samples=g.samples_per_prompt, deltas=(-gate_plan.EFFECT, gate_plan.EFFECT), trials=400)
    p = gate_plan.plan(g, n_prompts, search=False, **kw)
    if p.rates[-gate_plan.EFFECT] <= g.alpha and p.rates[gate_plan.EFFECT] >= gate_plan.POWER:
        return None
    p = gate_plan.plan(g, n_prompts, **kw)  # with the size that would do (~1-3 s)
    return (
        f"the gate's eval set {set_name!r} is small for its rule: {p.summary()} "
        "(raise tasks.heldout_prompts or the [[evals]] prompts; `ratchet gate plan`)"
    )


def check_round_disk(ctx: Ctx) -> None:
    """Refuse (DiskSpaceError, one line) when the run dir's disk cannot hold what the next round writes."""
    weights = sum(f.stat().st_size for f in resolve_model(ctx.cfg.model.name_or_path).glob("*.safetensors"))
    check_free_disk(ctx.cfg.resolved_run_dir(), round_write_bytes(weights, 1, False))  # a round saves only its candidate


@task(name="prepare-campaign", cache_policy=NONE)
def prepare_campaign(config_path: str) -> str:
    """Create the schema, register the base checkpoint, the campaign and its held-out prompts."""
    ctx = load_ctx(config_path)
    init_db(ctx.db)
    base_dir = resolve_model(ctx.cfg.model.name_or_path)
    base_id = read_checkpoint_id(base_dir)
    settings = ctx.cfg.campaign_settings()
    with transaction(ctx.db) as con:
        check_same_settings(con, ctx.cfg)
        insert_rows(
            con,
            "checkpoints",
            [
                dict(
                    checkpoint_id=base_id,
                    parent_id=None,
                    training_run_id=None,
                    model_ref=ctx.cfg.model.name_or_path,
                    path=str(base_dir.resolve()),
                    created_at=now(),
                )
            ],
        )
        insert_rows(
            con,
            "campaigns",
            [
                dict(
                    campaign_id=ctx.campaign_id,
                    name=ctx.cfg.campaign,
                    base_checkpoint_id=base_id,
                    config_json=json.dumps(settings),
                    created_at=now(),
                )
            ],
        )
        pin_eval_set(con, ctx)
    return ctx.campaign_id


def pin_eval_set(con, ctx: Ctx) -> list[Prompt]:
    """The campaign's evaluation prompts: those pinned in the store (``eval_set_prompts``), or, for a new
    campaign, the ones drawn now, which it pins. Either way they are written to the campaign's run dir,
    where every stage reads them, so later rounds evaluate exactly these whatever happens to the files."""
    rows = pinned_eval_prompts(con, ctx.campaign_id)
    if rows:
        prompts = [Prompt(**{k: r[k] for k in Prompt.__dataclass_fields__}) for r in rows]
    else:
        # A campaign that evaluated before eval sets were pinned keeps the set it used (same eval set id, so the
        # gate's best-ever floor continues); a new campaign pins what it draws now.
        legacy = last_evaluated_prompts(con, ctx.campaign_id)
        sets = (
            [("heldout", [Prompt(**{k: r[k] for k in Prompt.__dataclass_fields__}) for r in legacy])]
            if legacy
            else ctx.tasks.eval_sets(ctx.cfg)
        )
        prompts = [p for _, ps in sets for p in ps]
        names = [name for name, ps in sets for _ in ps]
        insert_rows(con, "prompts", prompt_rows(prompts))
        insert_rows(
            con,
            "eval_set_prompts",
            [
                dict(campaign_id=ctx.campaign_id, position=i, eval_name=names[i], prompt_id=p.prompt_id, created_at=now())
                for i, p in enumerate(prompts)
            ],
        )
    pin_eval_prompts(ctx, prompts)
    return prompts


@task(name="start-round", cache_policy=NONE)
def start_round(config_path: str, round_index: int) -> str:
    """Record the round and fix its incumbent (kept as is when a crashed round is resumed)."""
    ctx = load_ctx(config_path, round_index)
    check_round_disk(ctx)
    with transaction(ctx.db) as con:
        state = campaign_state(con, ctx.campaign_id, ctx.eval_set_id())
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id=ctx.round_id,
                    campaign_id=ctx.campaign_id,
                    round_index=round_index,
                    incumbent_checkpoint_id=state.incumbent_checkpoint_id,
                    status="running",
                    started_at=now(),
                    finished_at=None,
                    stage_seconds_json=None,
                    stage=ctx.phase_name,
                )
            ],
        )
        register_teacher(con, ctx)
        # A resumed round (crashed or failed before its gate) is running again.
        set_round_status(con, ctx.round_id, "running")
        insert_rows(con, "round_manifests", [_manifest(ctx)], replace=True)  # what this attempt runs with
        claim_round(con, ctx.round_id, process_owner(), current_flow_run_id())  # `ratchet up` spots it if this process dies
        return round_incumbent(con, ctx.round_id)


def _manifest(ctx: Ctx) -> dict:
    """The round's manifest row: versions, git commit, devices, seeds, config and prompt-template hashes."""
    template = chat_template_of(resolve_model(ctx.cfg.model.name_or_path))
    return {**round_manifest(ctx.cfg, ctx.round_id, verifier_versions(ctx.reward), template), "created_at": now()}


def _training_guards(con, ctx: Ctx) -> list[str]:
    """Guard metrics of the round's training pass that should halt the campaign (KL drift, entropy collapse, a stale engine)."""
    g = ctx.cfg.grpo
    return training_guards(training_metrics(con, ctx.round_id), ctx.cfg.algorithm, g.max_kl, g.min_entropy, g.max_sampler_gap)


def _stage_seconds(ctx: Ctx, checkpoints: list[str | None]) -> dict[str, float]:
    """Compute seconds per stage of this round, from the stage markers (reused evaluations count 0)."""
    sec = lambda stage, step=0: (read_marker(ctx.at_step(step).stage_dir(stage)) or {}).get("compute_s", 0.0)  # noqa: E731
    out = {s: sum(sec(s, k) for k in range(ctx.steps)) for s in ("generate", "verify", "filter", "train")}
    looks = [d.name for c in set(checkpoints) if c for d in ctx.stage_dir("x").parent.glob(f"evaluate-{c}-*")]  # sequential
    out["evaluate"] = sum(sec(f"evaluate-{c}") for c in set(checkpoints) if c) + sum(sec(d) for d in looks)
    return out


def _decide_candidate(
    con, ctx: Ctx, round_index: int, incumbent: str, candidate: str, consecutive_rejections: int, created_at
) -> tuple[dict, list[dict], list[dict]]:
    """The gate on a trained candidate: the decision row's fields, one ``gate_set_decisions`` row per eval set and one
    ``round_monitors`` row per monitor (stamped ``created_at``, the decision's own time); a tripped monitor halts."""
    g, es = ctx.cfg.gate, ctx.eval_set_id()
    monitors = measure_stored(
        con, es, incumbent, candidate, ctx.verifier_version, g.monitors, target_language=ctx.cfg.verifier.target_language,
        cross_check=ctx.cfg.verifier.cross_check,
    )  # fmt: skip
    d = decide_stored(
        con, Grouping.of(ctx.cfg), ctx.campaign_id, round_index, es, incumbent, candidate, ctx.verifier_version, g,
        consecutive_rejections=consecutive_rejections, tripped_guards=_training_guards(con, ctx) + tripped_reasons(monitors),
        pinned=len(ctx.heldout()),
    )  # fmt: skip
    sets, res, best_ids, bases = d.sets, d.gate, d.best_ids, base_pass1(d)
    if d.note:
        run_logger().warning("gate: best ever promoted %s", d.note)
    cand_pass1, inc_pass1 = pooled(sets)  # the report's pooled figures; the decision is per set
    gating = [s for s in sets if s.role == "gate"]
    plan_rates = None if g.sequential else gate_plan.plan(
        g, min(len(s.candidate) for s in gating), samples=g.samples_per_prompt,
        deltas=(-gate_plan.EFFECT, gate_plan.EFFECT), trials=400, search=False,
    )  # fmt: skip
    decided = dict(
        decision=res.decision,
        reason=res.reason,
        candidate_pass1=cand_pass1,
        incumbent_pass1=inc_pass1,
        delta=cand_pass1 - inc_pass1,
        p_value=res.p_value,
        lower_bound=res.lower_bound,
        best_lower_bound=res.best_lower_bound,
        best_checkpoint_id=best_ids[gating[0].name] if len(gating) == 1 else None,
        error_rates_json=json.dumps(plan_rates.as_dict()) if plan_rates else None,
        **decision_columns(d),
    )
    set_rows = [
        dict(
            round_id=ctx.round_id,
            eval_name=v.name,
            role=v.role,
            num_prompts=v.result.n,
            decision=v.result.decision,
            passed=v.passed,
            reason=v.result.reason,
            candidate_pass1=v.result.candidate_pass1,
            incumbent_pass1=v.result.incumbent_pass1,
            best_promoted_pass1=v.result.best_promoted_pass1,
            lower_bound=v.result.lower_bound,
            best_lower_bound=v.result.best_lower_bound,
            base_pass1=bases.get(v.name),
            created_at=created_at,
            **pass_at_k_columns(v.pass_k),
        )
        for v in res.sets
    ]
    return decided, set_rows, monitor_rows(ctx.round_id, es, monitors, created_at)


NOTHING_TO_TRAIN = {
    "rft": "no verified-correct trajectories to train on",
    "grpo": "no group of rollouts with differing rewards to train on",
}


def no_candidate_decision(algorithm: str, consecutive_rejections: int, max_rejections: int) -> dict:
    """The gate row's fields for a round that trained nothing: decision ``no_candidate`` (not a gate ``reject``: no
    candidate was judged), or ``halt`` when it makes ``max_rejections`` rounds in a row without a promotion."""
    halt = consecutive_rejections + 1 >= max_rejections
    why = NOTHING_TO_TRAIN.get(algorithm, "nothing to train on")
    return dict(
        decision="halt" if halt else "no_candidate",
        candidate_pass1=None,
        delta=None,
        p_value=None,
        reason=f"no candidate: {why} (raise generation.group_size, add easier prompts, or use generation.teacher)"
        + (f"; {consecutive_rejections + 1} rounds in a row without a promotion" if halt else ""),
    )


@task(name="gate", cache_policy=NONE)
def gate(config_path: str, round_index: int, incumbent: str, candidate: str | None) -> dict:
    """Decide each eval set of the round on paired held-out outcomes (``ratchet.loop.gate.eval_sets``); record promote /
    reject / halt with the rule and settings it ran with, and one verdict per eval set."""
    ctx, log = load_ctx(config_path, round_index), run_logger()
    g = ctx.cfg.gate
    es = ctx.eval_set_id()
    with transaction(ctx.db) as con:
        existing = gate_decision(con, ctx.round_id)
    if existing:  # a resumed round whose gate had decided: finish what the decision implies
        apply_retention(ctx)
        return {"decision": existing[0], "reason": existing[1]}
    with transaction(ctx.db) as con:
        state = campaign_state(con, ctx.campaign_id, es)
        for c in carry_over_promoted(con, ctx, round_index):  # evaluated under an older verifier: re-verified first
            log.info("gate: re-verified the stored evaluation of %s under verifier %s", c, ctx.verifier_version)
        inc_scores = scores(eval_outcomes(con, incumbent, es, ctx.verifier_version), g.samples_per_prompt)
        inc_pass1 = sum(inc_scores) / len(inc_scores)
        best = state.best_promoted_pass1 if state.best_promoted_pass1 is not None else inc_pass1
        row = dict(
            round_id=ctx.round_id,
            campaign_id=ctx.campaign_id,
            candidate_checkpoint_id=candidate,
            incumbent_checkpoint_id=incumbent,
            test=g.test,
            tolerance=g.margin,
            best_promoted_pass1=best,
            incumbent_pass1=inc_pass1,
            created_at=now(),
            rule=g.rule,
            settings_json=g.model_dump_json(),
            verifier_version=ctx.verifier_version,
            eval_set_id=es,
        )
        set_rows: list[dict] = []
        monitors: list[dict] = []
        if candidate is None:  # nothing trained: no gate ran, and a run of such rounds halts like rejections do
            row.update(no_candidate_decision(ctx.cfg.algorithm, state.consecutive_rejections, g.max_consecutive_rejections))
        else:
            decided, set_rows, monitors = _decide_candidate(
                con, ctx, round_index, incumbent, candidate, state.consecutive_rejections, row["created_at"]
            )
            row.update(decided)
        # One transaction: the decision, the promotion it implies and the round's completion land together.
        insert_rows(con, "gate_decisions", [row])
        if set_rows:
            insert_rows(con, "gate_set_decisions", set_rows)
        if monitors:
            insert_rows(con, "round_monitors", monitors)
        seconds = _stage_seconds(ctx, [incumbent, candidate])
        set_round_status(con, ctx.round_id, "completed", finished_at=now(), stage_seconds_json=json.dumps(seconds))
    log.info("gate: %s (%s)", row["decision"], row["reason"])
    publish_round(ctx, row)
    publish_promoted(ctx, row)  # [publish]: the promoted checkpoint to its model registries
    track_round(ctx)
    apply_retention(ctx)
    return {"decision": row["decision"], "reason": row["reason"]}


def round_run_name() -> str:
    """``'<campaign> round-<n>'``: the round's flow-run name, so a daemon's runs of several campaigns tell apart."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    try:
        name = json.loads(Path(params["config_path"]).read_text())["campaign"]
    except (OSError, KeyError, ValueError, TypeError):
        name = "campaign"  # never fails a round over its display name
    return f"{name} round-{params.get('round_index')}"


@flow(name="improvement_round", flow_run_name=round_run_name, log_prints=True)
def improvement_round(config_path: str, round_index: int) -> dict:
    """(generate -> verify -> filter -> train) x steps -> evaluate (incumbent, candidate) -> gate (-> confirm).

    With ``gate.refresh_after`` the round first draws a fresh gating slice when one is due
    (``ratchet.flows.rounds.gating.refresh``), so everything after evaluates on it.

    Under ``[[phases]]`` the round runs with its phase's config (``ratchet.loop.campaign.curriculum.phase_of``). An sft round
    (cold start) skips generate and verify and trains on its prompts' reference solutions; with
    ``generation.teacher`` the rollouts come from the teacher while the incumbent trains. A GRPO round with ``grpo.steps_per_round`` = S runs S on-policy steps, each on its share of the
    round's prompts and sampling from the policy the previous step trained; the last policy is the
    round's candidate. Every other round has one step. The round's one engine (``ratchet.flows.rounds.stages.round_engine``)
    is loaded on the incumbent at the start and serves every stage; the steps: ``ratchet.flows.rounds.stages.steps``.
    """
    refreshed = refresh_eval_set(config_path, round_index)  # gate.refresh_after: a fresh gating slice, evaluated first
    incumbent = start_round(config_path, round_index)
    try:
        ctx = load_ctx(config_path, round_index)
        budget = NightBudget.of(ctx)  # [schedule] max_wall_s / max_tokens of this attempt
        if refreshed and refreshed["best"]:  # the best ever promoted, on its own engine: the gate's floor on the new slice
            evaluate(config_path, round_index, refreshed["best"])
        with round_engine(ctx, incumbent) as engine:  # loaded once, on the incumbent, for every stage of the round
            if not ctx.cfg.gate.sequential:
                evaluate(config_path, round_index, incumbent, engine=engine)  # the engine holds it: nothing to load
                budget.check("the incumbent's evaluation")
            candidate = round_steps(config_path, round_index, incumbent, engine)
            budget.check("training")
            if candidate is not None and ctx.cfg.gate.sequential:
                evaluate_sequentially(config_path, round_index, incumbent, candidate, engine)  # batches until a bound decides
            elif candidate is not None:
                evaluate(config_path, round_index, candidate, engine=engine)
            elif ctx.cfg.gate.sequential:
                evaluate(config_path, round_index, incumbent, engine=engine)
        decided = gate(config_path, round_index, incumbent, candidate)
        if decided["decision"] == "promote" and candidate is not None:
            confirm(config_path, round_index, candidate)  # the confirmation set: read only on promotion
        return decided
    except BudgetSpent as e:  # a clean stop: the next run resumes the round from its finished stages
        with transaction(ctx.db) as con:
            set_round_status(con, ctx.round_id, "budget_spent", finished_at=now())
        run_logger().warning("round %d stopped: %s; the next run resumes it", round_index, e)
        return {"decision": "budget_spent", "reason": str(e)}
    except Exception:
        ctx = load_ctx(config_path, round_index)
        with transaction(ctx.db) as con:  # visible in `ratchet status`; a re-run resumes the round
            set_round_status(con, ctx.round_id, "failed", finished_at=now())
        raise


@flow(name="campaign", flow_run_name="{campaign_name}", log_prints=True)
def campaign(config_path: str, campaign_name: str = "demo", rounds: int | None = None, config: dict | None = None) -> list[dict]:
    """Run up to ``rounds`` new rounds (None: until ``max_rounds``, or forever when that is unset) or until
    a halt or pause; finished rounds are skipped (and listed), a crashed one resumes and counts as new.

    ``config``: the campaign's config as JSON (a work pool's deployment carries it, ``ratchet up --work-pool``): the
    flow run checks it here, on the worker, like ``ratchet run`` (``preflight``), saves it where its tasks read it
    and ignores ``config_path`` (a path on the machine that deployed it).

    Raises:
        ConfigError, StoreError, ModelError, TaskDataError, CampaignConflict: ``config`` fails the checks.
    """
    if config is not None:
        config_path = str(worker_config(config))
    with file_mode(load_ctx(config_path).cfg.service.file_mode):  # the store, run dir and models it creates
        return _campaign_rounds(config_path, rounds)


def worker_config(config: dict) -> Path:
    """Check a deployment's config on the machine that runs it and save it there (``save_config``); returns the path.

    Raises:
        ConfigError: the JSON is not a valid config. Also as ``preflight``.
    """
    from pydantic import ValidationError

    from ratchet.loop.config import ConfigError

    try:
        cfg = RatchetConfig.model_validate(config)
    except ValidationError as e:
        raise ConfigError(
            f"the deployment's config is not valid here ({e.errors()[0]['msg']}); redeploy it with `ratchet up`"
        ) from None
    with file_mode(cfg.service.file_mode):
        cfg = with_campaign_epoch(cfg)
        preflight(cfg)
        return save_config(cfg)


def _campaign_rounds(config_path: str, rounds: int | None) -> list[dict]:
    log = run_logger()
    prepare_campaign(config_path)
    config_path = apply_recorded_settings(config_path)  # settings a `campaign resume --set` changed
    ctx = load_ctx(config_path)
    decisions, ran, r = [], 0, 1
    while ctx.cfg.max_rounds is None or r <= ctx.cfg.max_rounds:
        with connect(ctx.db, read_only=True) as con:
            state = campaign_state(con, ctx.campaign_id, ctx.eval_set_id())
            done = gate_decision(con, Ctx(ctx.cfg, r).round_id)
        if done:
            decisions.append({"round": r, "decision": done[0], "reason": done[1]})
            r += 1
            continue
        if state.halted or state.paused:
            why = "halted" if state.halted else "paused"
            log.warning("campaign %s is %s; not starting round %d (`ratchet campaign resume` lifts it)", ctx.cfg.campaign, why, r)
            break
        if rounds is not None and ran >= rounds:
            break
        decisions.append({"round": r, **improvement_round(config_path, r)})
        if decisions[-1]["decision"] == "budget_spent":
            break  # the night's budget is spent: the next run resumes this round
        ran, r = ran + 1, r + 1
    return decisions


def run_campaign(config_path: str | Path, rounds: int | None = None) -> list[dict]:
    """Run the campaign flow in this process: ``rounds`` new rounds at most (None: up to ``max_rounds``)."""
    ctx = load_ctx(config_path)
    return campaign(str(config_path), campaign_name=ctx.cfg.campaign, rounds=rounds)
