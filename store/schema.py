"""The trajectory store's schema: SQLModel table classes (DDL is generated from these for DuckDB).

Keys are deterministic text hashes (DuckDB rejects SQLModel's autoincrement ``SERIAL``), floats are
declared ``DOUBLE`` (Python ``float`` would map to 32-bit ``FLOAT``), and ingest is ``INSERT OR
IGNORE`` on the primary key, so re-running a stage never duplicates a row.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ARRAY, Double, Integer, String
from sqlmodel import Field, SQLModel


def _dbl(**kw):
    return Field(sa_type=Double, **kw)


class Campaign(SQLModel, table=True):
    __tablename__ = "campaigns"
    campaign_id: str = Field(primary_key=True, description="sha256(name)[:16]")
    name: str
    base_checkpoint_id: str
    config_json: str = Field(description="The campaign's full RatchetConfig as JSON")
    created_at: datetime


class Round(SQLModel, table=True):
    __tablename__ = "rounds"
    round_id: str = Field(primary_key=True, description="'<campaign_id>-r<index>'")
    campaign_id: str
    round_index: int = Field(description="1-based; round 0 is the base evaluation")
    incumbent_checkpoint_id: str = Field(description="Policy that generated this round's rollouts")
    status: str = Field(
        description="running | completed | failed | crashed (its process died while running) | interrupted (a signal "
        "stopped its process: Ctrl-C, SIGTERM, `ratchet up` stopping; the next run resumes it) | budget_spent (stopped at "
        "a stage boundary by [schedule] max_wall_s / max_tokens; the next run resumes it)"
    )
    started_at: datetime
    finished_at: datetime | None = None
    stage_seconds_json: str | None = Field(None, description="Wall seconds per stage, JSON")
    owner: str | None = Field(None, description="'<host>:<pid>' of the process that last ran the round (to detect crashes)")
    flow_run_id: str | None = Field(None, description="Prefect flow run of the round's last attempt")
    stage: str | None = Field(
        None,
        description="[[phases]] name of the round, its curriculum phase (NULL: a campaign without phases); the column keeps its old name",
    )
    rollout_path: str | None = Field(
        None,
        description="Where the round's engine ran: '1 process' or 'N ranks (DDP|FSDP)' (ratchet.flows.compute.engine."
        "Placement); older stores also hold 'persistent (N ranks)' and 'per-step: <why>'; NULL: a round from before it was kept",
    )


class Checkpoint(SQLModel, table=True):
    __tablename__ = "checkpoints"
    checkpoint_id: str = Field(primary_key=True, description="Hash of the weights' manifest")
    parent_id: str | None = Field(None, description="Checkpoint it was fine-tuned from; NULL for a base model")
    training_run_id: str | None = None
    model_ref: str = Field(description="Base model reference (alias, path or HF id)")
    path: str | None = Field(
        None,
        description="Folder of its weights; NULL for an on-policy step's policy that was never written (a persistent "
        "round pushed it into the engine in place; id: ratchet.loop.checkpoints.unsaved_checkpoint_id)",
    )
    created_at: datetime
    deleted_at: datetime | None = Field(None, description="When retention deleted its weights (the row stays for lineage)")


class PromptRow(SQLModel, table=True):
    __tablename__ = "prompts"
    prompt_id: str = Field(primary_key=True)
    source: str
    task: str
    question: str
    answer: str
    split: str = Field(description="train | heldout, fixed by a hash of the normalized question")
    task_format: str | None = Field(None, description="math | humaneval | mbpp | stdio (NULL: math, stored before formats)")
    tests_json: str | None = Field(None, description="Code tests as a JSON list (assert/setup lines, stdio cases); NULL for math")
    entry_point: str | None = Field(None, description="Function under test (humaneval)")
    solution: str | None = Field(None, description="Reference solution (a whole program for code tasks)")
    question_key: str | None = Field(None, description="sha256 of the whitespace/case-normalized question: decontamination key")
    record_json: str | None = Field(
        None, description="records format: the whole task record as JSON (what the source's verifier is given); else NULL"
    )


class EvalSetPrompt(SQLModel, table=True):
    __tablename__ = "eval_set_prompts"
    campaign_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True, description="Order in which the campaign evaluates its prompts (0-based)")
    eval_name: str = Field(description="[[evals]] name, or 'heldout' for the default held-out set")
    prompt_id: str
    created_at: datetime


class ConfirmationPrompt(SQLModel, table=True):
    """A campaign's confirmation set (``gate.confirmation_prompts``): held-out prompts never gated on, read only when a
    candidate is promoted, for the promoted checkpoint's unbiased pass@1 (docs/gate.md)."""

    __tablename__ = "confirmation_prompts"
    campaign_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True, description="Order in the confirmation set (0-based, over every set's slice)")
    prompt_id: str
    created_at: datetime
    eval_name: str | None = Field(
        None, description="The eval set whose confirmation slice it is ([[evals]] name or 'heldout'; NULL: 'heldout')"
    )


class EvalSetVersion(SQLModel, table=True):
    """A refresh of a campaign's gating slice (``gate.refresh_after``): the eval set it replaced and the new one, whose
    prompts ``eval_set_prompts`` now holds; the replaced slice's prompts are kept here, never to be drawn again."""

    __tablename__ = "eval_set_versions"
    campaign_id: str = Field(primary_key=True)
    version: int = Field(primary_key=True, description="1 for the first refresh (0: the slice pinned at the start)")
    round_id: str = Field(description="The round that drew it, before its incumbent's evaluation")
    promotions: int = Field(description="The campaign's promotions when it was drawn (a refresh every refresh_after)")
    eval_set_id: str = Field(description="The new eval set id (its prompts, decoding settings and verifier version)")
    replaced_eval_set_id: str = Field(description="The eval set id it replaced")
    num_prompts: int
    replaced_prompt_ids_json: str = Field(description="The replaced slice's prompt ids (JSON list): gated on, retired")
    created_at: datetime


class Trajectory(SQLModel, table=True):
    __tablename__ = "trajectories"
    trajectory_id: str = Field(
        primary_key=True, description="hash(round or eval set, prompt_id, checkpoint_id, purpose, sample_index)"
    )
    round_id: str
    prompt_id: str
    checkpoint_id: str
    purpose: str = Field(
        description="rollout | rationalization (a hinted rollout, sft.rationalization) | eval_greedy | eval_sample"
    )
    eval_set_id: str | None = Field(None, description="Held-out evaluation set, for eval_* trajectories")
    sample_index: int
    completion: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = Field(
        description="stop (EOS) | stop_string (a generation.stop string: the text ends before it) | length | "
        "environment_error (a multi-turn episode whose environment's step raised: it ended there, judged verifier_error)"
    )
    backend: str
    temperature: float = _dbl()
    top_p: float = _dbl()
    max_new_tokens: int
    seed: int
    created_at: datetime
    step: int | None = Field(
        None,
        description="On-policy step of the round that sampled it (grpo.steps_per_round); 0 for rollouts of "
        "one-step rounds, NULL for evaluations",
    )
    completion_token_ids: list[int] | None = Field(
        None,
        sa_type=ARRAY(Integer),
        description="The sampled completion's token ids (EOS included when it stopped): what training uses; a multi-turn "
        "episode's whole stream after prompt_messages (every assistant turn's sampled ids, the environment's messages "
        "between them as the chat template renders them; completion_mask). NULL only for rows written before they were "
        "stored (training re-tokenizes their text and says so)",
    )
    stop: list[str] | None = Field(
        None,
        sa_type=ARRAY(String),
        description="The stop strings sampling ran with (generation.stop); NULL: none",
    )
    sampler_logprobs: list[float] | None = Field(
        None,
        sa_type=ARRAY(Double),
        description="log pi_sampler of each sampled token (nats) under the distribution it was drawn from (logits / "
        "temperature, renormalised over the top-p nucleus; 0.0 on an episode's environment tokens, completion_mask 0); "
        "NULL when not requested (GRPO rollouts request them)",
    )
    prompt_ids_hash: str | None = Field(
        None, description="sha256 of the prompt token ids the engine was given, 16 hex (loop.generation.base.prompt_ids_hash)"
    )
    prompt_messages: str | None = Field(
        None,
        description="The exact chat the engine was given (JSON list of {role, content}: system, few-shot turns, user): "
        "export and training read it, never re-render it from settings. NULL only for rows written before it was stored",
    )
    turns: int | None = Field(
        None, description="Assistant turns of the episode (1: a single-turn completion; NULL: stored before episodes)"
    )
    messages: str | None = Field(
        None,
        description="A multi-turn episode after prompt_messages: JSON list of {role, content} (assistant turns and the "
        "environment's user/tool messages); NULL for single-turn rows",
    )
    completion_mask: list[int] | None = Field(
        None,
        sa_type=ARRAY(Integer),
        description="Per completion_token_ids entry: 1 if the model sampled it, 0 for an environment's tokens between "
        "turns (never trained on); NULL: every token is the model's",
    )


class VerdictRow(SQLModel, table=True):
    __tablename__ = "verdicts"
    trajectory_id: str = Field(primary_key=True)
    verifier: str = Field(primary_key=True)
    verifier_version: str = Field(primary_key=True)
    reward: float = _dbl()
    correct: bool
    reason: str
    parsed: str | None = None
    format_ok: bool | None = None
    latency_s: float = _dbl()
    created_at: datetime
    read_chars: int | None = Field(
        None,
        description="How many characters of the completion the verifier read (NULL: all); RFT trains on that prefix "
        "(ended with EOS), GRPO masks the sampled tokens past it: what the verifier did not read is never trained on",
    )


class TrainingRun(SQLModel, table=True):
    __tablename__ = "training_runs"
    training_run_id: str = Field(primary_key=True)
    round_id: str
    algorithm: str
    input_checkpoint_id: str
    output_checkpoint_id: str
    num_examples: int
    config_json: str
    metrics_json: str
    started_at: datetime
    finished_at: datetime
    step: int | None = Field(None, description="On-policy step of the round (grpo.steps_per_round); 0 for one-step rounds")


class TrainingExample(SQLModel, table=True):
    __tablename__ = "training_examples"
    training_run_id: str = Field(primary_key=True)
    trajectory_id: str = Field(
        primary_key=True,
        description="The example: a trajectory id (origin 'rollout'), the prompt id whose reference solution was "
        "trained on ('reference'), or a hash of a general SFT record ('general')",
    )
    origin: str | None = Field(
        None,
        description="rollout (a verified trajectory) | reference (a prompt's reference solution) | general "
        "(sft.general_data) | rationalization (a verified hinted rollout, trained without the hint); NULL: rollout, "
        "stored before origins",
    )


class RoundPrompt(SQLModel, table=True):
    """A training prompt a round sampled and why (``tasks.selection``; docs/selection.md): its pass-rate estimate for
    the incumbent when it was picked, and whether it refilled a dropped group (``grpo.max_oversample``)."""

    __tablename__ = "round_prompts"
    round_id: str = Field(primary_key=True)
    prompt_id: str = Field(primary_key=True)
    step: int = Field(description="On-policy step that sampled it (0 for one-step rounds)")
    position: int = Field(description="Its place in the round's ranked slots (0-based; picked ones first)")
    selection: str = Field(description="tasks.selection of the round: uniform | frontier")
    pick: str = Field(description="uniform | frontier (best score) | explore (drawn at selection_explore) | reserve (a refill)")
    refill_pass: int = Field(description="0: the step's first draw; k > 0: drawn in the k-th refill of dropped groups")
    estimate: float = _dbl(description="Posterior mean pass rate E[p] = alpha / (alpha + beta) when picked")
    alpha: float = _dbl(description="Beta posterior alpha: prior m s plus the prompt's recent correct rollouts")
    beta: float = _dbl(description="Beta posterior beta: prior (1 - m) s plus its recent wrong rollouts")
    seen_rollouts: int = Field(description="The prompt's rollouts by the incumbent's lineage in the selection window")
    seen_correct: int = Field(description="... of which verified correct")
    informative: float = _dbl(description="P(a group of G has both right and wrong answers) under the posterior")
    created_at: datetime


class Evaluation(SQLModel, table=True):
    __tablename__ = "evaluations"
    evaluation_id: str = Field(primary_key=True, description="hash(checkpoint_id, eval_set_id, metric)")
    round_id: str = Field(description="Round that first computed it (later rounds reuse it)")
    checkpoint_id: str
    eval_set_id: str = Field(description="Hash of the held-out prompt ids and decoding settings")
    metric: str = Field(description="heldout/pass@1, heldout/pass@k (k samples), heldout/no_answer_rate, ...")
    value: float = _dbl()
    num_prompts: int
    created_at: datetime


class GateDecision(SQLModel, table=True):
    __tablename__ = "gate_decisions"
    round_id: str = Field(primary_key=True)
    campaign_id: str
    candidate_checkpoint_id: str | None
    incumbent_checkpoint_id: str
    decision: str = Field(description="promote | reject | halt | no_candidate (the round trained nothing: no candidate to judge)")
    reason: str
    candidate_pass1: float | None = _dbl(default=None)
    incumbent_pass1: float = _dbl()
    best_promoted_pass1: float = _dbl()
    delta: float | None = _dbl(default=None)
    p_value: float | None = _dbl(default=None)
    test: str
    tolerance: float = _dbl()
    created_at: datetime
    min_detectable_effect: float | None = _dbl(
        default=None, description="Old rows: smallest drop the old rule's test detects (normal approximation); new rows NULL"
    )
    rule: str | None = Field(None, description="noninferiority | no_detected_drop (NULL: decided by the old rule)")
    settings_json: str | None = Field(None, description="The [gate] settings the decision ran with (JSON)")
    lower_bound: float | None = _dbl(default=None, description="(1 - alpha) lower bound of the pass@1 change vs the incumbent")
    best_checkpoint_id: str | None = Field(None, description="The best checkpoint ever promoted it was compared with")
    best_lower_bound: float | None = _dbl(default=None, description="The same bound vs the best checkpoint ever promoted")
    verifier_version: str | None = Field(None, description="Verifier version of the outcomes it compared")
    eval_set_id: str | None = Field(None, description="The eval set whose per-prompt outcomes it compared")
    error_rates_json: str | None = Field(
        None, description="Simulated promote rates of the rule at this eval size (ratchet.loop.gate.error_rates.Plan.as_dict)"
    )
    eval_prompts_used: int | None = Field(None, description="Sequential gate: eval prompts it used (NULL: not sequential)")
    sequential_looks: int | None = Field(None, description="Sequential gate: looks (batches) it took")
    sequential_stop: str | None = Field(None, description="Sequential gate: promoted | halted | futile | max_prompts")
    drift: float | None = _dbl(default=None, description="pass@1 change of the candidate from the base on the drift set")
    drift_upper_bound: float | None = _dbl(default=None, description="(1 - alpha) upper bound of that change")
    drift_set: str | None = Field(None, description="The drift set (guard set, else gating set) with the smallest bound")
    confirmed_pass1: float | None = _dbl(
        default=None,
        description="A promoted candidate's greedy pass@1 on the confirmation set (read only on promotion; unbiased by "
        "the selection on the gating set); NULL: not promoted or no confirmation set",
    )
    confirmation_eval_set_id: str | None = Field(None, description="The confirmation set's eval set id")


class GateSetDecision(SQLModel, table=True):
    """The gate's verdict on one eval set of a round (each source's held-out set or each [[evals]] set)."""

    __tablename__ = "gate_set_decisions"
    round_id: str = Field(primary_key=True)
    eval_name: str = Field(primary_key=True, description="[[evals]] name, a source name, or 'heldout'")
    role: str = Field(description="gate | guard | report")
    num_prompts: int
    decision: str = Field(description="promote | reject | halt (what this set alone says)")
    passed: bool = Field(description="gate: bound >= -margin; guard: no shown regression; report: always true")
    reason: str
    candidate_pass1: float | None = _dbl(default=None)
    incumbent_pass1: float = _dbl()
    best_promoted_pass1: float | None = _dbl(default=None)
    lower_bound: float | None = _dbl(default=None)
    best_lower_bound: float | None = _dbl(default=None)
    created_at: datetime
    base_pass1: float | None = _dbl(default=None, description="The base checkpoint's pass@1 on this set (drift)")
    pass_at_k: int | None = Field(None, description="K of the pass@k guard (gate.pass_at_k; NULL: off or not a gating set)")
    candidate_pass_at_k: float | None = _dbl(default=None, description="Mean unbiased pass@K per prompt (Chen et al. 2021)")
    incumbent_pass_at_k: float | None = _dbl(default=None)
    base_pass_at_k: float | None = _dbl(default=None, description="The base's, on the prompts it has K samples on")
    pass_at_k_lower_bound: float | None = _dbl(
        default=None, description="(1 - alpha) lower bound of the pass@K change vs the incumbent (BCa cluster bootstrap)"
    )
    pass_at_k_base_lower_bound: float | None = _dbl(default=None, description="The same vs the base")
    confirmed_pass1: float | None = _dbl(
        default=None,
        description="A promoted candidate's greedy pass@1 on this set's confirmation slice (NULL: not promoted, none)",
    )


class RoundMonitorRow(SQLModel, table=True):
    """A reward-hacking monitor measured at a round's gate (``[gate.monitors]``; ratchet.loop.gate.monitors)."""

    __tablename__ = "round_monitors"
    round_id: str = Field(primary_key=True)
    monitor: str = Field(
        primary_key=True,
        description="length_mean_ratio | length_p90_ratio | truncation_rate | format_without_correct | no_answer_rate "
        "| same_answer_share | language_mixing | cross_check_disagreement",
    )
    value: float = _dbl(description="length_*: candidate / reference; others: candidate share - reference share")
    threshold: float | None = _dbl(default=None, description="gate.monitors.<monitor> it ran with (NULL: measured only)")
    tripped: bool = Field(description="value > threshold on at least gate.monitors.min_prompts prompts: the campaign halted")
    candidate_value: float = _dbl(description="The candidate's figure (mean or P90 tokens, or a share)")
    reference_value: float = _dbl(description="The reference's figure on the same prompts")
    reference: str = Field(description="incumbent | golds (what the candidate is compared with)")
    num_prompts: int = Field(description="Prompts compared (greedy evaluation completions both sides have)")
    eval_set_id: str
    created_at: datetime


class CampaignEvent(SQLModel, table=True):
    """A person's (or the daemon's) halt, pause or resume of a campaign: who, when, why."""

    __tablename__ = "campaign_events"
    event_id: str = Field(primary_key=True, description="hash(campaign_id, action, created_at, actor)")
    campaign_id: str
    action: str = Field(description="halt | pause | resume")
    reason: str
    actor: str = Field(description="'<user>@<host>' of the process that recorded it")
    after_round_index: int = Field(description="Rounds gated when it was recorded: it applies from the next round on")
    settings_json: str | None = Field(None, description="Settings changed with a resume (JSON), e.g. a lower lr")
    created_at: datetime


class RoundManifest(SQLModel, table=True):
    """What a round ran with: versions, devices, seeds and hashes, to reproduce or explain it."""

    __tablename__ = "round_manifests"
    round_id: str = Field(primary_key=True)
    ratchet_version: str
    git_commit: str | None = None
    python_version: str
    versions_json: str = Field(description="torch, transformers, vllm, prefect, duckdb, ... versions (null: not installed)")
    devices_json: str = Field(description="Device names the round could use")
    seeds_json: str
    config_hash: str = Field(description="sha256 of the campaign settings JSON")
    prompt_template_hash: str = Field(description="sha256 of the system prompt, few-shot setting and chat template")
    verifier_versions_json: str
    run_settings_json: str | None = Field(
        None, description="max_rounds, the schedule and the run dir this round ran under (JSON)"
    )
    created_at: datetime


TABLES = [
    Campaign,
    Round,
    Checkpoint,
    PromptRow,
    EvalSetPrompt,
    ConfirmationPrompt,
    EvalSetVersion,
    Trajectory,
    VerdictRow,
    TrainingRun,
    TrainingExample,
    RoundPrompt,
    Evaluation,
    GateDecision,
    GateSetDecision,
    RoundMonitorRow,
    CampaignEvent,
    RoundManifest,
]

VIEWS = {
    # One row per round: what it generated, kept, scored, and what the gate decided.
    "round_summary": """
        SELECT c.name AS campaign, r.round_index, r.stage, r.round_id, r.status,
               r.incumbent_checkpoint_id, g.candidate_checkpoint_id,
               (SELECT count(*) FROM trajectories t WHERE t.round_id = r.round_id AND t.purpose = 'rollout') AS rollouts,
               (SELECT count(*) FROM trajectories t JOIN verdicts v USING (trajectory_id)
                 WHERE t.round_id = r.round_id AND t.purpose = 'rollout' AND v.correct) AS verified_correct,
               (SELECT count(*) FROM training_runs tr JOIN training_examples te USING (training_run_id)
                 WHERE tr.round_id = r.round_id) AS training_examples,
               g.incumbent_pass1, g.candidate_pass1, g.delta, g.p_value, g.decision, g.reason, g.lower_bound,
               g.best_lower_bound, g.rule, g.tolerance, g.confirmed_pass1,
               r.started_at, r.finished_at
        FROM rounds r JOIN campaigns c USING (campaign_id)
        LEFT JOIN gate_decisions g USING (round_id)
        ORDER BY c.name, r.round_index""",
    # Triage of a gate decision: the held-out prompts whose greedy verdict differs between the round's incumbent and
    # candidate, on the eval set and verifier version the decision compared (decisions that recorded both).
    "gate_flips": """
        WITH g AS (SELECT round_id, eval_set_id, verifier_version, incumbent_checkpoint_id, candidate_checkpoint_id
                   FROM gate_decisions
                   WHERE candidate_checkpoint_id IS NOT NULL AND eval_set_id IS NOT NULL AND verifier_version IS NOT NULL),
             o AS (SELECT t.checkpoint_id, t.eval_set_id, t.prompt_id, v.verifier_version, bool_or(v.correct) AS correct
                   FROM trajectories t JOIN verdicts v USING (trajectory_id)
                   WHERE t.purpose = 'eval_greedy' GROUP BY ALL)
        SELECT g.round_id, g.eval_set_id, i.prompt_id, i.correct AS incumbent_correct, c.correct AS candidate_correct
        FROM g JOIN o i ON i.checkpoint_id = g.incumbent_checkpoint_id AND i.eval_set_id = g.eval_set_id
                        AND i.verifier_version = g.verifier_version
               JOIN o c ON c.checkpoint_id = g.candidate_checkpoint_id AND c.eval_set_id = g.eval_set_id
                        AND c.verifier_version = g.verifier_version AND c.prompt_id = i.prompt_id
        WHERE i.correct <> c.correct
        ORDER BY g.round_id, i.prompt_id""",
    # Verifier monitoring: reward mean/variance and the count of each verdict reason per round and task.
    "round_verifier_stats": """
        SELECT t.round_id, p.source, p.task, t.purpose, v.verifier, v.verifier_version,
               count(*) AS n, avg(v.reward) AS reward_mean, var_pop(v.reward) AS reward_var,
               avg(v.correct::INT) AS correct_rate, histogram(v.reason) AS reasons
        FROM trajectories t JOIN verdicts v USING (trajectory_id) JOIN prompts p USING (prompt_id)
        GROUP BY ALL ORDER BY t.round_id, p.source, p.task, t.purpose""",
}
