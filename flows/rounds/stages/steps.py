"""A round's steps, one loop for every algorithm: (generate -> verify -> filter -> train) x ``ctx.steps``.

RFT and SFT rounds have one step; a GRPO round has ``grpo.steps_per_round`` on-policy steps, each sampling from the
policy the previous step trained. Every step runs on the round's one engine (``ratchet.flows.rounds.stages.round_engine``),
loaded at the round's start: a GRPO step's pass trains the engine's co-located learner and its weights reach the
engine in place; the step's policy gets a ``checkpoints`` row with ``path`` NULL and the id
``unsaved_checkpoint_id(parent, training_run)``, so the next step's trajectories name it, and only the round's
candidate (the last step's policy) is written to disk and hashed. An RFT step's pass runs in the engine's rank
processes and writes its candidate.

Resume: a step is done iff its train marker exists, and every done step's rows are in the store. A resumed GRPO round
starts from the round's incumbent and replays the done steps' training passes on their stored groups (same samples,
same seeds: nothing is generated or inserted again), so the learner, its AdamW moments and the engine hold the policy
the first undone step samples from; then it runs the remaining steps. On CPU the replay is bit-identical; on GPU
kernels may make it differ in the last bits (the ids name what made a policy, parent and training run, not its bytes).
"""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
from prefect import task
from prefect.cache_policies import NONE

from ratchet.common.files import publish_dir
from ratchet.flows.compute.engine import RoundEngine
from ratchet.flows.compute.learner_requests import grpo_step, sft_step
from ratchet.flows.compute.resolve import checkpoint_path, rollout_cap
from ratchet.flows.rounds.observe.progress import bar
from ratchet.flows.rounds.observe.run_log import run_logger
from ratchet.flows.rounds.stages.frame import StageRun, stage_frame
from ratchet.flows.rounds.stages.pipeline import filter_trajectories, generate, record_training, training_run_id, verify
from ratchet.flows.rounds.stages.rationale_data import uses_rationalization
from ratchet.flows.rounds.stages.rationalize import rationalize
from ratchet.flows.rounds.stages.sft_data import filter_sft_data, uses_sft_data
from ratchet.flows.rounds.state.phases import teacher_checkpoint
from ratchet.loop.campaign.round_context import Ctx, load_ctx, now, read_marker
from ratchet.loop.checkpoints import unsaved_checkpoint_id, write_checkpoint_manifest
from ratchet.store.db import connect, transaction
from ratchet.store.queries import campaign_state, round_incumbent


def round_steps(config_path: str, round_index: int, incumbent: str, engine: RoundEngine) -> str | None:
    """Run the round's steps from ``incumbent`` on ``engine`` (resuming after its done steps); returns the
    candidate's checkpoint id (None: nothing trained)."""
    ctx, log = load_ctx(config_path, round_index), run_logger()
    markers = [read_marker(ctx.at_step(k).stage_dir("train")) for k in range(ctx.steps)]
    done = next((k for k, m in enumerate(markers) if m is None), ctx.steps)
    outputs = [m["checkpoint_id"] for m in markers[:done] if m["checkpoint_id"]]
    if ctx.cfg.algorithm == "grpo" and 0 < done < ctx.steps:
        log.info("round %d: resuming at step %d; replaying the training of steps 1-%d", round_index, done + 1, done)
        for k in range(done):
            replay_step(engine, ctx.at_step(k))
        if outputs:
            engine.holds = outputs[-1]
    teacher = teacher_checkpoint(ctx)
    for step in range(done, ctx.steps):
        policy = outputs[-1] if outputs else incumbent
        if ctx.cfg.algorithm != "sft":  # a cold-start round trains on reference solutions: no rollouts
            generate(config_path, round_index, step, teacher or policy, engine)  # a teacher's rollouts distil (rft only)
            verify(config_path, round_index, step)
            if uses_rationalization(ctx):  # STaR: hinted rollouts of the prompts nothing solved (rft: one step)
                rationalize(config_path, round_index, teacher or policy, engine)
        (filter_sft_data if uses_sft_data(ctx) else filter_trajectories)(config_path, round_index, step)
        trained = train(config_path, round_index, step, policy, engine)
        if trained is not None:
            outputs.append(trained)
    return outputs[-1] if outputs else None


def replay_step(engine: RoundEngine, ctx: Ctx) -> None:
    """Re-run a done GRPO step's training pass on its stored groups (same samples and seed); nothing is written."""
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    if examples:
        engine.train_step(grpo_step(ctx, examples, rollout_cap(ctx)))


@task(name="train", cache_policy=NONE)
def train(config_path: str, round_index: int, step: int, policy: str, engine: RoundEngine) -> str | None:
    """This step's training pass on the round's engine: RFT (or SFT) from the incumbent or the base (``sft.init``),
    or a GRPO-family pass of the engine's learner from ``policy``.

    Returns the new policy's id (GRPO: ``unsaved_checkpoint_id(policy, training run)`` with a ``path`` NULL row, or on
    the round's last step the saved candidate's manifest id); None when nothing changed.
    """
    with stage_frame(config_path, round_index, "train", step=step) as s:
        if s.done:
            return s.marker["checkpoint_id"]
        return (_grpo_pass if s.ctx.cfg.algorithm == "grpo" else _rft_pass)(s, policy, engine)


def _rft_pass(s: StageRun, policy: str, engine: RoundEngine) -> str | None:
    """Fine-tune (rft, or sft on reference solutions) on the step's examples in the engine's ranks; saves the candidate."""
    ctx, log, cfg = s.ctx, s.log, s.ctx.cfg
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    with connect(ctx.db, read_only=True) as con:
        state = campaign_state(con, ctx.campaign_id, ctx.eval_set_id())
        incumbent = round_incumbent(con, ctx.round_id)
    init_id = state.base_checkpoint_id if cfg.sft.init == "base" else (policy or incumbent)
    run_id, started = training_run_id(ctx, init_id, examples), now()
    tmp = ctx.checkpoints_dir / f".tmp-{run_id}"
    shutil.rmtree(tmp, ignore_errors=True)
    progress = bar(f"{ctx.round_id}-train-{ctx.step}", f"round {ctx.round_index}: {cfg.algorithm}")
    engine.progress = lambda _bar, done, total: progress(done, total)
    with s.timer.compute():
        res = engine.train_step(sft_step(ctx, checkpoint_path(ctx, init_id), examples, tmp)) if examples else {}
        ckpt_id = write_checkpoint_manifest(tmp) if res.get("saved") else None
    engine.progress = None
    progress(1, 1)  # finished: the ranks' last progress line may still be in flight on their stdout (round_engine.sample)
    metrics = res.get("metrics", {})
    if ckpt_id is None:
        log.warning("nothing to train on this round (%d rows from the filter stage)", len(examples))
        s.finish({"checkpoint_id": None, "metrics": metrics})
        return None
    final = ctx.checkpoints_dir / ckpt_id
    publish_dir(tmp, final)  # atomic: a half-written checkpoint is never under its id (same id: same weights, kept)
    row = dict(checkpoint_id=ckpt_id, parent_id=init_id, training_run_id=run_id, path=str(final.resolve()))
    consumed = [e["trajectory_id"] for e in examples]
    with transaction(ctx.db) as con:  # before the marker: a crash in between re-records the same rows (idempotent)
        record_training(con, ctx, row, run_id, started, metrics, consumed, init_id, examples)
    s.finish({"checkpoint_id": ckpt_id, "training_run_id": run_id, "metrics": metrics})
    log.info("trained %s with %s on %d trajectories: %s", ckpt_id, cfg.algorithm, len(consumed), metrics)
    return ckpt_id


def _grpo_pass(s: StageRun, policy: str, engine: RoundEngine) -> str | None:
    """One GRPO pass of the engine's learner on the step's groups, then the policy's rows (the candidate saved on the
    round's last step)."""
    ctx, log, timer, step = s.ctx, s.log, s.timer, s.ctx.step
    examples = pq.read_table(ctx.stage_dir("filter") / "examples.parquet").to_pylist()
    run_id, started = training_run_id(ctx, policy, examples), now()
    progress = bar(f"{ctx.round_id}-train-{step}", f"round {ctx.round_index}: grpo (step {step + 1}/{ctx.steps})")
    engine.progress = lambda _name, done, total: progress(done, total)
    with timer.compute():
        res = (
            engine.train_step(grpo_step(ctx, examples, rollout_cap(ctx))) if examples else {"steps": 0, "metrics": {}, "kept": []}
        )
    engine.progress = None
    progress(max(res["steps"], 1), max(res["steps"], 1))  # finished (also when no group carried signal)
    trained, last = res["steps"] > 0, step == ctx.steps - 1
    if not trained and not (last and step > 0 and _moved(ctx, policy)):
        log.warning("nothing to train on at step %d (%d rows from the filter stage)", step, len(examples))
        s.finish({"checkpoint_id": None, "metrics": res["metrics"]})
        return None
    if last:  # the round's candidate: the only policy of the round written to disk
        with timer.compute():
            ckpt_id, path = save_candidate(engine, ctx)
    else:
        ckpt_id, path = unsaved_checkpoint_id(policy, run_id), None
    run = run_id if trained else None  # untrained last step: a saved copy of the unsaved policy it started from
    consumed = [examples[i]["trajectory_id"] for i in res["kept"]]
    with transaction(ctx.db) as con:
        row = dict(checkpoint_id=ckpt_id, parent_id=policy, training_run_id=run, path=path)
        record_training(con, ctx, row, run, started, res["metrics"], consumed, policy)
    engine.holds = ckpt_id  # the engine samples from this policy now (saved or not)
    s.finish({"checkpoint_id": ckpt_id, "training_run_id": run, "saved": path is not None})
    log.info("step %d: %s %s on %d trajectories", step, "saved" if path else "updated in place", ckpt_id, len(consumed))
    return ckpt_id


def _moved(ctx: Ctx, policy: str) -> bool:
    """Whether ``policy`` differs from the round's start (an earlier step of the round trained it)."""
    return any((read_marker(ctx.at_step(k).stage_dir("train")) or {}).get("checkpoint_id") == policy for k in range(ctx.step))


def save_candidate(engine: RoundEngine, ctx: Ctx) -> tuple[str, str]:
    """Write the learner's policy under the run's checkpoints (atomically, named by its manifest id); returns (id, path)."""
    tmp = ctx.checkpoints_dir / f".tmp-{ctx.round_id}-candidate"
    shutil.rmtree(tmp, ignore_errors=True)
    engine.save(tmp)
    ckpt_id = write_checkpoint_manifest(tmp)
    final = ctx.checkpoints_dir / ckpt_id
    publish_dir(tmp, final)  # same id: same weights, kept
    return ckpt_id, str(final.resolve())
