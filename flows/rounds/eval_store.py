"""``ratchet eval --db``: an evaluation stored as a round of an evaluation-only campaign, queryable like any other.

Each ``ratchet eval --db PATH`` is one round (status ``completed``, no gate decision) of the campaign
``--campaign NAME`` (default ``eval-<task file stem>``), whose ``config_json`` carries ``"evaluation_only": true``.
The round stores the prompts, the checkpoint (its id hashes its weights, as a campaign's base), the greedy
(``eval_greedy``) and sampled (``eval_sample``) trajectories with their verdicts, and the ``evaluations`` rows
(``heldout/pass@1``, ``heldout/pass@k``, ``heldout/no_answer_rate``) on an eval set whose id hashes the prompts and
the decoding settings. Trajectory ids hash (eval set, prompt, checkpoint, purpose, sample), so evaluating the same
model on the same prompts again adds a round but no duplicate rows; two models on one file compare in SQL::

    SELECT e.checkpoint_id, e.value, e.num_prompts FROM evaluations e JOIN rounds r USING (round_id)
    JOIN campaigns c USING (campaign_id) WHERE c.name = 'eval-gsm8k' AND e.metric = 'heldout/pass@1'
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from ratchet.loop.campaign.round_context import Ctx, campaign_id_of, now, short_hash
from ratchet.loop.checkpoints import is_smollm2_alias, read_checkpoint_id
from ratchet.loop.config import RatchetConfig
from ratchet.loop.evaluation.metrics import eval_set_id
from ratchet.loop.evaluation.scoring import verdict_row
from ratchet.loop.generation.sampling import Completion, SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.store.db import connect, init_db, require_store, transaction
from ratchet.store.ingest import insert_rows

EVALUATION_ONLY = "evaluation_only"  # the key of an evaluation-only campaign's config_json


def default_campaign(tasks: Path) -> str:
    """``eval-<file stem>``: the campaign ``ratchet eval --db`` stores under without ``--campaign``."""
    return f"eval-{Path(tasks).stem}"


def stored_checkpoint(db: Path | None, ref: str) -> Path | None:
    """The weights folder of the stored checkpoint ``ref`` (an id, or a unique prefix of >= 6 hex digits, of any
    campaign's checkpoint in ``db``), checked to hash to its id; None when ``ref`` is a folder, the SmolLM2 alias or
    a hub id (``resolve_model`` takes those), or there is no store to look in.

    Raises:
        ValueError: ``ref`` looks like a checkpoint id but matches none, or several, of the store's checkpoints.
        LookupError: its weights were never saved. ModelError: its folder changed or was deleted by retention.
    """
    from ratchet.flows.compute.resolve import verified_checkpoint_dir

    if Path(ref).exists() or is_smollm2_alias(ref) or "/" in ref or not all(c in "0123456789abcdef" for c in ref):
        return None
    if db is None or not Path(db).is_file():
        raise ValueError(f"--model {ref!r} is not a folder: to evaluate a stored checkpoint by its id, pass --db STORE")
    with connect(db, read_only=True) as con:
        require_store(con, db)
        ids = [
            r[0]
            for r in con.execute("SELECT checkpoint_id FROM checkpoints WHERE starts_with(checkpoint_id, ?)", [ref]).fetchall()
        ]
        if len(ref) < 6 or len(ids) != 1:
            what = "is shorter than 6 digits" if len(ref) < 6 else f"matches {len(ids)} checkpoints of {db}"
            raise ValueError(f'--model {ref!r} {what}; `ratchet sql "SELECT checkpoint_id, path FROM checkpoints"` lists them')
        return verified_checkpoint_dir(con, ids[0])


def record_evaluation(
    db: Path,
    campaign: str,
    cfg: RatchetConfig,
    model_dir: Path,
    model_ref: str,
    prompts: list[Prompt],
    chats: list[list[dict]],
    runs: list[tuple[str, SamplingParams, list[Completion], list]],
    metrics: dict[str, float],
    seconds: float,
) -> str:
    """Store one evaluation as the next round of the evaluation-only ``campaign`` in ``db`` (created when missing).

    Args:
        runs: ``(purpose, params, completions, scored)`` per decoding: ``eval_greedy`` and, with samples,
            ``eval_sample``; ``scored`` holds ``(outcome verifier name, Verdict)`` per completion, in order.
        metrics: the ``evaluations`` rows' metric -> value (``heldout/pass@1``, ...), over ``len(prompts)`` prompts.
        seconds: the evaluation's wall time (the round's ``stage_seconds_json`` ``eval``).

    Returns:
        The round id (``<campaign_id>-r<index>``).
    Raises:
        ValueError: ``campaign`` names a training campaign of the store (pass another ``--campaign``).
        StoreError: ``db`` is not a Ratchet store or cannot be opened for writing.
    """
    init_db(db)
    cfg = cfg.model_copy(update={"campaign": campaign, "campaign_epoch": 0})
    campaign_id = campaign_id_of(campaign)
    checkpoint_id = read_checkpoint_id(model_dir)
    g = cfg.generation
    settings = {
        "max_new_tokens": runs[0][1].max_new_tokens,
        "num_samples": runs[1][1].n if len(runs) > 1 else 0,
        "temperature": runs[1][1].temperature if len(runs) > 1 else 0.0,
        "source": cfg.tasks.sources[0].source_name(),
        "system_prompt": cfg.tasks.sources[0].system_prompt,
        "fewshot": sum(m["role"] == "assistant" for m in chats[0][:-1]) if chats else 0,
        "verifier": Ctx(cfg).verifier_version,
    }
    es = eval_set_id([p.prompt_id for p in prompts], settings)
    with transaction(db) as con:
        row = con.execute("SELECT config_json FROM campaigns WHERE campaign_id = ?", [campaign_id]).fetchone()
        if row is not None and not json.loads(row[0]).get(EVALUATION_ONLY):
            raise ValueError(
                f"campaign {campaign!r} of {db} trains a model; store this evaluation under another name: --campaign eval-NAME"
            )
        index = con.execute(
            "SELECT coalesce(max(round_index), 0) + 1 FROM rounds WHERE campaign_id = ?", [campaign_id]
        ).fetchone()[0]
        ctx = Ctx(cfg, index)
        ts = now()
        checkpoint = dict(checkpoint_id=checkpoint_id, parent_id=None, training_run_id=None, model_ref=model_ref)
        insert_rows(con, "checkpoints", [dict(**checkpoint, path=str(Path(model_dir).resolve()), created_at=ts)])
        config_json = json.dumps({**cfg.campaign_settings(), EVALUATION_ONLY: True})
        insert_rows(
            con,
            "campaigns",
            [
                dict(
                    campaign_id=campaign_id,
                    name=campaign,
                    base_checkpoint_id=checkpoint_id,
                    config_json=config_json,
                    created_at=ts,
                )
            ],
        )
        insert_rows(
            con,
            "rounds",
            [
                dict(
                    round_id=ctx.round_id,
                    campaign_id=campaign_id,
                    round_index=index,
                    incumbent_checkpoint_id=checkpoint_id,
                    status="completed",
                    started_at=ts,
                    finished_at=ts,
                    stage_seconds_json=json.dumps({"eval": round(seconds, 3)}),
                )
            ],
        )
        insert_rows(con, "prompts", [asdict(p) for p in prompts])
        from ratchet.flows.rounds.stages.pipeline import trajectory_rows

        for purpose, params, comps, scored in runs:
            trajs = trajectory_rows(ctx, prompts, comps, checkpoint_id, purpose, params, g.backend, es, chats)
            insert_rows(con, "trajectories", trajs)
            insert_rows(con, "verdicts", [verdict_row(t["trajectory_id"], k, vd, ts) for t, (k, vd) in zip(trajs, scored)])
        rows = [
            dict(
                evaluation_id=short_hash(checkpoint_id, es, metric),
                round_id=ctx.round_id,
                checkpoint_id=checkpoint_id,
                eval_set_id=es,
                metric=metric,
                value=float(value),
                num_prompts=len(prompts),
                created_at=ts,
            )
            for metric, value in metrics.items()
        ]
        insert_rows(con, "evaluations", rows, replace=True)
    return ctx.round_id
