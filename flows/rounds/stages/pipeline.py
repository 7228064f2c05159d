"""One Prefect task per stage of a round: generate, verify, filter, train, evaluate, gate.

Each task takes the campaign's config path and the round index (plus a checkpoint id where needed) and
runs inside ``stage_frame`` (``ratchet.flows.rounds.stages.frame``), which skips the work when the stage's marker
exists (crash-resume) and ingests the stage's immutable Parquet idempotently; the task holds only its
own work. Nothing heavier than an id or a path crosses a task boundary.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from ratchet.common.seeds import derive_seed
from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.compute.resolve import rollout_cap
from ratchet.flows.rounds.stages.frame import StageRun, stage_frame
from ratchet.flows.rounds.stages.multi_turn import sample_prompts
from ratchet.flows.rounds.stages.rationale_data import rationalized_examples
from ratchet.flows.rounds.stages.rollout_batches import batch_rollouts, drop_batches
from ratchet.flows.rounds.stages.round_engine import engine_for
from ratchet.flows.rounds.state import round_prompts as selection
from ratchet.flows.rounds.state.reverify import carry_over
from ratchet.loop.campaign.round_context import Ctx, now, short_hash
from ratchet.loop.evaluation.episode_scoring import failed_episode_verdicts, stored_episode
from ratchet.loop.evaluation.metrics import PromptOutcome, sampled_metrics, summarize
from ratchet.loop.evaluation.scoring import score_items, verdict_row
from ratchet.loop.generation.sampling import Completion, SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.tasks.supervised import training_example_rows
from ratchet.store.db import connect, transaction
from ratchet.store.ingest import insert_rows, write_parquet
from ratchet.store.queries import (
    eval_outcomes,
    eval_sample_verdicts,
    rollout_groups,
    round_incumbent,
    stored_metrics,
    training_set,
)

# --- shared helpers -------------------------------------------------------------------------------


def prompt_rows(prompts: list[Prompt]) -> list[dict]:
    return [asdict(p) for p in prompts]


def trajectory_rows(
    ctx: Ctx,
    prompts: list[Prompt],
    comps: list[Completion],
    checkpoint_id: str,
    purpose: str,
    params: SamplingParams,
    backend: str,
    eval_set: str | None = None,
    chats: list[list[dict[str, str]]] | None = None,
) -> list[dict]:
    """Store rows for completions. Ids hash (round or eval set, prompt, checkpoint, purpose, sample index[, step > 0]).

    Each row keeps the exact chat its prompt was generated from (``prompt_messages``: an episode's opening, else
    ``chats[i]`` when given, e.g. a rationalization's hinted chat, else the same ``ctx.messages`` the engine was given),
    so export and training read it instead of re-rendering it from settings. A multi-turn episode also keeps its
    ``messages`` after the opening (JSON), its assistant ``turns`` and the ``completion_mask`` of its token stream
    (1 = sampled by the model); a single-turn row has ``turns`` 1 and NULL for both.
    """
    scope = eval_set if eval_set else ctx.round_id
    given = {c.prompt_index: json.dumps(chats[c.prompt_index] if chats else ctx.messages(prompts[c.prompt_index])) for c in comps}
    step = None if eval_set else ctx.step
    extra = (ctx.step,) if step else ()
    ts = now()
    return [
        dict(
            trajectory_id=short_hash(scope, prompts[c.prompt_index].prompt_id, checkpoint_id, purpose, c.sample_index, *extra),
            step=step,
            round_id=ctx.round_id,
            prompt_id=prompts[c.prompt_index].prompt_id,
            checkpoint_id=checkpoint_id,
            purpose=purpose,
            eval_set_id=eval_set,
            sample_index=c.sample_index,
            completion=c.text,
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            finish_reason=c.finish_reason,
            backend=backend,
            temperature=params.temperature,
            top_p=params.top_p,
            max_new_tokens=params.max_new_tokens,
            seed=params.seed,
            stop=list(params.stop) or None,
            created_at=ts,
            completion_token_ids=list(c.token_ids),
            sampler_logprobs=None if c.logprobs is None else list(c.logprobs),
            prompt_ids_hash=c.prompt_hash or None,
            prompt_messages=json.dumps(list(c.opening)) if c.opening is not None else given[c.prompt_index],
            turns=c.turns,
            messages=None if c.messages is None else json.dumps(list(c.messages)),
            completion_mask=None if c.mask is None else list(c.mask),
        )
        for c in comps
    ]


def verdict_rows(ctx: Ctx, trajs: list[dict], prompt_by_id: dict[str, dict]) -> list[dict]:
    """Score trajectories with their prompt's outcome verifier (math or code) inside the composite reward.

    ``prompt_by_id`` maps a prompt id to its store row (``answer``, ``task_format``, ``tests_json``,
    ``solution``). Each row's ``verifier`` names the outcome verifier; ``reward`` is the composite; ``read_chars``
    the verifier's read span (for a completion a ``generation.stop`` string ended: its whole text, as its sampled ids
    run through the string). A multi-turn episode is judged on its final assistant message (``completion``), or by its
    environment's ``score(messages, record)`` when it has one (``loop.evaluation.episode_scoring``).
    """
    episodes = [stored_episode(t) for t in trajs]  # an environment's own score() judges these
    scored = score_items([t["completion"] for t in trajs], [prompt_by_id[t["prompt_id"]] for t in trajs], ctx.reward, episodes)
    vds = failed_episode_verdicts(trajs, [vd for _, vd in scored])  # an environment that raised: verifier_error
    ts = now()
    rows = [verdict_row(t["trajectory_id"], kind, vd, ts) for t, (kind, _), vd in zip(trajs, scored, vds)]
    for t, row in zip(trajs, rows):  # a stop string ended it: its ids run past the text, which is all that was read
        if t.get("finish_reason") == "stop_string" and row["read_chars"] is None:
            row["read_chars"] = len(t["completion"])
    return rows


def per_source_metrics(ctx: Ctx, outcomes: list[PromptOutcome]) -> dict[str, tuple[float, int]]:
    """``heldout/<source>/pass@1`` and ``.../no_answer_rate`` per task source of the eval set (campaigns with
    several ``[[tasks.sources]]`` or with ``[[evals]]``; a single-source campaign's overall metrics say it already),
    each as ``(value, number of that source's eval prompts)``."""
    if len(ctx.cfg.tasks.sources) < 2 and not ctx.cfg.evals:
        return {}
    source = {p.prompt_id: p.source for p in ctx.heldout()}
    groups: dict[str, list[PromptOutcome]] = {}
    for o in outcomes:
        groups.setdefault(source.get(o.prompt_id, "unknown"), []).append(o)
    out = {}
    for name, group in sorted(groups.items()):
        for k, v in summarize(group, ()).items():
            out[k.replace("heldout/", f"heldout/{name}/", 1)] = (v, len(group))
    return out


def training_run_id(ctx: Ctx, init_id: str, examples: list[dict]) -> str:
    """Deterministic id of a step's training run: algorithm, round, start policy, consumed candidates, settings."""
    ids = sorted(e["trajectory_id"] for e in examples)
    return short_hash(ctx.cfg.algorithm, ctx.round_id, init_id, ids, ctx.trainer_cfg.model_dump_json())


def record_training(
    con,
    ctx: Ctx,
    checkpoint: dict,
    run_id: str | None,
    started,
    metrics: dict,
    consumed: list[str],
    input_id: str,
    examples: list[dict] | None = None,
) -> None:
    """Insert a trained policy's ``checkpoints`` row (``checkpoint``: its id, parent, training run and path, NULL
    when never written) and, with ``run_id``, the training run that made it and the examples it consumed (each
    with its origin from ``examples``: rollout, reference solution or general data; default rollout)."""
    cfg = ctx.cfg
    insert_rows(con, "checkpoints", [dict(model_ref=cfg.model.name_or_path, created_at=now(), **checkpoint)])
    if run_id is None:
        return
    run = dict(training_run_id=run_id, round_id=ctx.round_id, algorithm=cfg.algorithm, input_checkpoint_id=input_id)
    run |= dict(output_checkpoint_id=checkpoint["checkpoint_id"], num_examples=len(consumed), step=ctx.step)
    run |= dict(
        config_json=ctx.trainer_cfg.model_dump_json(), metrics_json=json.dumps(metrics), started_at=started, finished_at=now()
    )
    insert_rows(con, "training_runs", [run])
    insert_rows(con, "training_examples", training_example_rows(run_id, consumed, examples or []))


# --- stages ---------------------------------------------------------------------------------------


@task(name="generate", cache_policy=NONE)
def generate(config_path: str, round_index: int, step: int, policy: str | None, engine: RoundEngine) -> str:
    """Sample this step's train prompts (``tasks.selection``) and G rollouts each from ``policy`` (default: the
    incumbent) on the round's engine, refilling zero-variance groups from the step's reserve (``grpo.max_oversample``);
    ingest the prompts, trajectories and the ``round_prompts`` rows that say why each prompt was sampled."""
    with stage_frame(config_path, round_index, "generate", step=step) as s:
        out = s.out
        files = {k: out / f for k, f in _GENERATE_FILES.items()}
        s.ingest("prompts", files["prompts"])
        s.ingest("trajectories", files["trajectories"])
        if not s.done or files["selection"].is_file():  # absent in a stage run before round_prompts existed
            s.ingest("round_prompts", files["selection"])
        if not s.done:
            _generate_work(s, policy, files, engine)
    return str(files["trajectories"])


_GENERATE_FILES = {
    "prompts": "prompts.parquet",
    "trajectories": "part-0.parquet",
    "selection": "selection.parquet",
    "verdicts": "verdicts.parquet",  # written only when a refill verified the groups (the verify stage reuses them)
}


def _generate_work(s: StageRun, policy: str | None, files: dict[str, Path], engine: RoundEngine) -> None:
    ctx = s.ctx
    with connect(ctx.db, read_only=True) as con:
        incumbent = round_incumbent(con, ctx.round_id)
        slots = selection.round_slots(con, ctx, incumbent)
    policy = policy or incumbent
    rows: list[dict] = []
    ntok, verdicts, prompts = 0, [], []

    def sample(choices: list, refill_pass: int) -> list[bool]:
        nonlocal ntok
        batch = [c.prompt for c in choices]
        got_rows = _sample_groups(s, policy, batch, refill_pass, engine)
        rows.extend(got_rows)
        prompts.extend(batch)
        ntok += sum(t["completion_tokens"] for t in got_rows)
        if not any(x.choice.pick == "reserve" and x.step == ctx.step for x in slots):
            return [True] * len(choices)  # no refill: nothing to decide, verification is the verify stage's
        scored = verdict_rows(ctx, got_rows, {p.prompt_id: asdict(p) for p in batch})
        verdicts.extend(scored)
        rewards: dict[str, set[float]] = {}
        for t, v in zip(got_rows, scored):
            rewards.setdefault(t["prompt_id"], set()).add(v["reward"])
        return [len(rewards.get(p.prompt_id, ())) > 1 for p in batch]

    taken = selection.sample_step(ctx, slots, sample)
    write_parquet(prompt_rows(prompts), files["prompts"], "prompts")
    write_parquet(rows, files["trajectories"], "trajectories")
    write_parquet(selection.round_prompt_rows(ctx, slots, taken), files["selection"], "round_prompts")
    if verdicts:
        write_parquet(verdicts, files["verdicts"], "verdicts")
    refilled = sum(k > 0 for _, k in taken)
    rate = ntok / max(s.timer.compute_s, 1e-9)
    resumed = s.counts.get("batches_resumed", 0)
    s.finish({"n": len(rows), "tokens": ntok, "tokens_per_s": rate, "prompts": len(taken), "refilled": refilled, **s.counts})
    drop_batches(s.out)  # part-0.parquet and the marker hold them now
    s.log.info("generated %d rollouts (%d tokens, %.1f tokens/s; %d prompts refilled)", len(rows), ntok, rate, refilled)
    if resumed:
        s.log.info(
            "resumed generation: %d of %d rollout batches were committed before the stop and read back; sampled the rest",
            resumed,
            s.counts["batches"],
        )


def _sample_groups(s: StageRun, policy: str, prompts: list[Prompt], refill_pass: int, engine: RoundEngine) -> list[dict]:
    """The trajectory rows of G rollouts of each prompt from ``policy`` (G per task source), committed batch by batch
    (``rollout_batches``: a resumed stage samples only the batches it has no shard of)."""
    ctx, g = s.ctx, s.ctx.cfg.generation
    rows: list[dict] = []
    by_g = ctx.tasks.group_sizes(prompts, g.group_size)  # G per task source ([[tasks.sources]] group_size)
    cap = rollout_cap(ctx)  # generation.max_new_tokens, or the 'auto' length rule on the last round
    seed = (
        derive_seed("rollouts", g.seed, ctx.round_index, ctx.step)
        if refill_pass == 0
        else derive_seed("refill", g.seed, ctx.round_index, ctx.step, refill_pass)
    )
    for G, subset in sorted(by_g.items()):
        params = SamplingParams(
            n=G,
            temperature=ctx.cfg.rollout_temperature,
            top_p=g.top_p,
            max_new_tokens=cap,
            seed=seed,
            logprobs=ctx.cfg.algorithm == "grpo",  # the trainer measures (and corrects) the sampler/learner gap
            stop=g.stop,
        )
        desc = f"round {ctx.round_index}: rollouts" + (f" (step {ctx.step + 1}/{ctx.steps})" if ctx.steps > 1 else "")
        desc += f", G={G}" if len(by_g) > 1 else ""
        desc += f", refill {refill_pass}" if refill_pass else ""
        to_rows = lambda comps, subset=subset, params=params: trajectory_rows(  # noqa: E731
            ctx, subset, comps, policy, "rollout", params, g.backend
        )
        with s.timer.compute():
            got = batch_rollouts(ctx, engine, policy, subset, params, desc, s.out, to_rows)
        rows += got.rows
        s.counts["batches"] = s.counts.get("batches", 0) + got.batches
        s.counts["batches_resumed"] = s.counts.get("batches_resumed", 0) + got.resumed
    return rows


@task(name="verify", cache_policy=NONE)
def verify(config_path: str, round_index: int, step: int = 0) -> str:
    """Score every rollout of the round's step; ingest the verdicts."""
    with stage_frame(config_path, round_index, "verify", step=step) as s:
        path = s.out / "part-0.parquet"
        s.ingest("verdicts", path)
        if not s.done:
            gen = s.ctx.stage_dir("generate")
            trajs = pq.read_table(gen / "part-0.parquet").to_pylist()
            prompts = {p["prompt_id"]: p for p in pq.read_table(gen / "prompts.parquet").to_pylist()}
            refilled = gen / _GENERATE_FILES["verdicts"]  # a refill verified them already, with the same scorer
            with s.timer.compute():
                rows = pq.read_table(refilled).to_pylist() if refilled.is_file() else verdict_rows(s.ctx, trajs, prompts)
            write_parquet(rows, path, "verdicts")
            reasons: dict[str, int] = {}
            for r in rows:
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
            s.finish({"n": len(rows), "correct": sum(r["correct"] for r in rows), "reasons": reasons})
            s.log.info("verified %d rollouts: %s", len(rows), reasons)
    return str(path)


@task(name="filter", cache_policy=NONE)
def filter_trajectories(config_path: str, round_index: int, step: int = 0) -> str:
    """Select the training data with a store query: verified-correct, deduplicated, per-prompt-capped train
    trajectories (rft), or every train-split group of this step with its rewards (grpo)."""
    with stage_frame(config_path, round_index, "filter", step=step) as s:
        path = s.out / "examples.parquet"
        if not s.done:
            with connect(s.ctx.db, read_only=True) as con:
                if s.ctx.cfg.algorithm == "grpo":  # every group, right and wrong: the advantages need both
                    rows = rollout_groups(con, s.ctx.round_id, s.ctx.verifier_version, step)
                else:  # verified rollouts, and rationalizations under their unhinted prompt (sft.rationalization)
                    rows = training_set(con, s.ctx.round_id, s.ctx.verifier_version, s.ctx.cfg.sft.max_per_prompt)
                    rows = [{**r, "origin": "rollout"} for r in rows] + rationalized_examples(con, s.ctx)
            write_parquet(rows or [], path)
            s.finish({"n": len(rows)})
    return str(path)


@task(name="evaluate", cache_policy=NONE)
def evaluate(
    config_path: str, round_index: int, checkpoint_id: str, prompts: int | None = None, engine: RoundEngine | None = None
) -> dict:
    """Held-out pass@1 (greedy) and pass@k of a checkpoint, sampled on the round's ``engine`` (None: an engine on the
    checkpoint for this stage, outside a round); reuses a stored evaluation when one exists, and re-verifies one stored
    under an older verifier version instead of generating again (``reverify.carry_over``).

    ``prompts`` (the sequential gate): evaluate only the first that many eval prompts in prompt-id order, generating
    just those the checkpoint has no stored outcomes on yet (each prompt's outcome is computed once and stored)."""
    dir_name = f"evaluate-{checkpoint_id}" if prompts is None else f"evaluate-{checkpoint_id}-{prompts}"
    with stage_frame(config_path, round_index, "evaluate", dir_name=dir_name) as s:
        ctx, out = s.ctx, s.out
        es = ctx.eval_set_id()
        with transaction(ctx.db) as con:  # evaluated under an older verifier: re-verify those completions, not regenerate
            if carry_over(con, ctx, checkpoint_id):
                s.log.info(
                    "re-verified the stored evaluation of %s under the current verifier %s", checkpoint_id, ctx.verifier_version
                )
                _record_evaluation(con, ctx, checkpoint_id, replace=True)
        with connect(ctx.db, read_only=True) as con:
            stored = stored_metrics(con, checkpoint_id, es)
            todo = None if prompts is None else _not_evaluated(con, ctx, checkpoint_id, prompts)
        if (stored and prompts is None) or (prompts is not None and not todo):
            s.log.info("reusing stored evaluation of %s on eval set %s", checkpoint_id, es)
            return stored
        files = [out / "greedy.parquet", out / "samples.parquet", out / "verdicts.parquet"]
        s.ingest("trajectories", *files[:2])
        s.ingest("verdicts", files[2])
        if not s.done:
            with engine_for(ctx, checkpoint_id, engine) as e:
                _evaluate_work(s, checkpoint_id, files, e, todo)
        metrics: dict = {}
        s.on_commit(lambda con: metrics.update(_record_evaluation(con, ctx, checkpoint_id, replace=prompts is not None)))
    s.log.info("held-out metrics of %s: %s", checkpoint_id, metrics)
    return metrics


def _not_evaluated(con, ctx: Ctx, checkpoint_id: str, prompts: int) -> list[Prompt]:
    """The first ``prompts`` eval prompts in prompt-id order (the sequential gate's order) without a stored outcome."""
    have = {o["prompt_id"] for o in eval_outcomes(con, checkpoint_id, ctx.eval_set_id(), ctx.verifier_version)}
    return [p for p in sorted(ctx.heldout(), key=lambda p: p.prompt_id)[:prompts] if p.prompt_id not in have]


def _evaluate_work(
    s: StageRun, checkpoint_id: str, files: list[Path], engine: RoundEngine, only: list[Prompt] | None = None
) -> None:
    """Generate the held-out completions (greedy, and the pass@k samples) of ``checkpoint_id`` and verify them
    (on ``only`` of the eval prompts when given)."""
    ctx, round_index = s.ctx, s.ctx.round_index
    prompts, e, g, es = ctx.heldout() if only is None else only, ctx.cfg.eval, ctx.cfg.generation, ctx.eval_set_id()
    greedy = SamplingParams(n=1, temperature=0.0, max_new_tokens=g.max_new_tokens_cap)  # fixed under 'auto' too
    sampled = (
        SamplingParams(n=e.num_samples, temperature=e.temperature, max_new_tokens=g.max_new_tokens_cap, seed=g.seed)
        if e.num_samples
        else None
    )
    with s.timer.compute():  # a source's environment runs its held-out prompts as episodes too (multi_turn)
        comps = sample_prompts(ctx, engine, checkpoint_id, prompts, greedy, f"round {round_index}: eval {checkpoint_id[:8]}")
        scomps = (
            sample_prompts(ctx, engine, checkpoint_id, prompts, sampled, f"round {round_index}: eval samples") if sampled else []
        )
    trajs = trajectory_rows(ctx, prompts, comps, checkpoint_id, "eval_greedy", greedy, g.backend, es)
    samples = trajectory_rows(ctx, prompts, scomps, checkpoint_id, "eval_sample", sampled, g.backend, es) if sampled else []
    with s.timer.compute():
        verdicts = verdict_rows(ctx, trajs + samples, {p.prompt_id: asdict(p) for p in prompts})
    write_parquet(trajs, files[0], "trajectories")
    write_parquet(samples, files[1], "trajectories" if samples else None)
    write_parquet(verdicts, files[2], "verdicts")
    s.finish({})


def _record_evaluation(con, ctx: Ctx, checkpoint_id: str, *, replace: bool = False) -> dict:
    """The ``evaluations`` rows of ``checkpoint_id`` on the campaign's eval set, from the stored verdicts; returns the
    metrics (``replace``: over every prompt evaluated so far, replacing a sequential gate's earlier, shorter rows)."""
    es = ctx.eval_set_id()
    # Per-prompt outcomes come from the same query the gate uses, so the two cannot disagree.
    outcomes = [PromptOutcome(**o) for o in eval_outcomes(con, checkpoint_id, es, ctx.verifier_version)]
    by_source = per_source_metrics(ctx, outcomes)
    metrics = summarize(outcomes, ctx.cfg.eval.ks) | {k: v for k, (v, _) in by_source.items()}
    if ctx.cfg.eval.num_samples:  # test-time compute: maj@k and best-of-n (by reward) over the same samples
        metrics |= sampled_metrics(eval_sample_verdicts(con, checkpoint_id, es, ctx.verifier_version), ctx.cfg.eval.ks)
    insert_rows(
        con,
        "evaluations",
        [
            dict(
                evaluation_id=short_hash(checkpoint_id, es, k),
                round_id=ctx.round_id,
                checkpoint_id=checkpoint_id,
                eval_set_id=es,
                metric=k,
                value=float(v),
                num_prompts=by_source[k][1] if k in by_source else len(outcomes),
                created_at=now(),
            )
            for k, v in metrics.items()
        ],
        replace=replace,
    )
    return metrics
