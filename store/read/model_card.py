"""A checkpoint's lineage from the store, and the Hugging Face model card (``README.md``) that states it.

``ratchet export --what model`` writes the card beside the weights: YAML front matter the Hub reads (``base_model``,
``model-index`` with the held-out score as metric type ``pass@1``) and a body with the base, the round whose gate
promoted the checkpoint, the training runs and the task sources they drew from, and the campaign's gate decisions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import duckdb
import yaml


@dataclass(frozen=True)
class ModelLineage:
    """What the store says about one checkpoint of one campaign (every value read from its rows)."""

    campaign: str
    checkpoint_id: str
    base_checkpoint_id: str
    base_model_ref: str  # the base's model reference (alias, path or HF id) as the campaign was configured
    promoted_in_round: int | None  # round whose gate promoted it (None: the base, or never promoted)
    heldout_pass1: float | None  # held-out pass@1 (greedy) of its newest evaluation in this campaign
    heldout_prompts: int | None
    training_runs: list[dict] = field(default_factory=list)  # oldest first: round_index, algorithm, num_examples, sources
    gate_decisions: list[dict] = field(default_factory=list)  # round order, up to the promoting round (all: unpromoted)


def resolve_checkpoint(con: duckdb.DuckDBPyConnection, campaign: str, checkpoint: str) -> tuple[str, str]:
    """``(campaign_id, checkpoint_id)`` for ``checkpoint``: an id (or a unique prefix of one, >= 6 hex digits) of a
    checkpoint this campaign evaluated or trained, or ``promoted`` (the campaign's incumbent: last promoted, else base).

    Raises:
        ValueError: no such campaign, or the id matches none (or several) of the campaign's checkpoints.
    """
    from ratchet.store.queries import campaign_state  # the incumbent rule the gate uses

    row = con.execute("SELECT campaign_id FROM campaigns WHERE name = ?", [campaign]).fetchone()
    if row is None:
        names = [r[0] for r in con.execute("SELECT name FROM campaigns ORDER BY name").fetchall()]
        raise ValueError(f"no campaign {campaign!r} in the store; campaigns: {', '.join(names) or 'none'}")
    campaign_id = row[0]
    if checkpoint == "promoted":
        # the incumbent does not depend on the eval set (only best_promoted_pass1 does, unused here)
        return campaign_id, campaign_state(con, campaign_id, "").incumbent_checkpoint_id
    ids = [
        r[0]
        for r in con.execute(
            """SELECT DISTINCT checkpoint_id FROM (
                 SELECT base_checkpoint_id AS checkpoint_id FROM campaigns WHERE campaign_id = $c
                 UNION ALL SELECT tr.output_checkpoint_id FROM training_runs tr JOIN rounds r USING (round_id) WHERE r.campaign_id = $c
                 UNION ALL SELECT e.checkpoint_id FROM evaluations e JOIN rounds r USING (round_id) WHERE r.campaign_id = $c)
               WHERE starts_with(checkpoint_id, $p) ORDER BY 1""",
            {"c": campaign_id, "p": checkpoint},
        ).fetchall()
    ]
    if len(checkpoint) < 6 or len(ids) != 1:
        what = "is shorter than 6 digits" if len(checkpoint) < 6 else f"matches {len(ids)} checkpoints"
        raise ValueError(
            f"--checkpoint {checkpoint!r} {what} of campaign {campaign!r}; pass 'promoted' or a checkpoint id "
            '(`ratchet sql "SELECT * FROM checkpoints"` lists them)'
        )
    return campaign_id, ids[0]


def model_lineage(con: duckdb.DuckDBPyConnection, campaign: str, checkpoint: str) -> ModelLineage:
    """The lineage of ``checkpoint`` (see :func:`resolve_checkpoint`) in ``campaign``: base, promoting round, held-out
    pass@1, the training runs along its parent chain and the gate decisions that led to it.

    Raises:
        ValueError: as :func:`resolve_checkpoint`.
    """
    campaign_id, cid = resolve_checkpoint(con, campaign, checkpoint)
    base_id, config_json = con.execute(
        "SELECT base_checkpoint_id, config_json FROM campaigns WHERE campaign_id = ?", [campaign_id]
    ).fetchone()
    base_ref = (
        json.loads(config_json).get("model", {}).get("name_or_path")
        or con.execute("SELECT model_ref FROM checkpoints WHERE checkpoint_id = ?", [base_id]).fetchone()[0]
    )
    promoted = con.execute(
        """SELECT min(r.round_index) FROM gate_decisions g JOIN rounds r USING (round_id)
           WHERE g.campaign_id = ? AND g.candidate_checkpoint_id = ? AND g.decision = 'promote'""",
        [campaign_id, cid],
    ).fetchone()[0]
    score = con.execute(
        """SELECT e.value, e.num_prompts FROM evaluations e JOIN rounds r USING (round_id)
           WHERE r.campaign_id = ? AND e.checkpoint_id = ? AND e.metric = 'heldout/pass@1'
           ORDER BY r.round_index DESC, e.created_at DESC LIMIT 1""",
        [campaign_id, cid],
    ).fetchone()
    last_round = promoted if promoted is not None else 1 << 30
    gates = con.execute(
        """SELECT r.round_index, g.decision, g.candidate_checkpoint_id, g.incumbent_checkpoint_id, g.candidate_pass1,
                  g.incumbent_pass1, g.reason
           FROM gate_decisions g JOIN rounds r USING (round_id) WHERE g.campaign_id = ? AND r.round_index <= ?
           ORDER BY r.round_index""",
        [campaign_id, last_round],
    ).fetchall()
    keys = ("round_index", "decision", "candidate", "incumbent", "candidate_pass1", "incumbent_pass1", "reason")
    return ModelLineage(
        campaign=campaign,
        checkpoint_id=cid,
        base_checkpoint_id=base_id,
        base_model_ref=base_ref,
        promoted_in_round=promoted,
        heldout_pass1=None if score is None else float(score[0]),
        heldout_prompts=None if score is None else int(score[1]),
        training_runs=_training_chain(con, cid),
        gate_decisions=[dict(zip(keys, g)) for g in gates],
    )


def _training_chain(con: duckdb.DuckDBPyConnection, cid: str) -> list[dict]:
    """The training runs that made ``cid`` from the base (following ``checkpoints.parent_id``), oldest first."""
    runs, seen = [], set()
    while cid and cid not in seen:  # a parent cycle cannot happen by construction; the set bounds the walk anyway
        seen.add(cid)
        row = con.execute("SELECT parent_id, training_run_id FROM checkpoints WHERE checkpoint_id = ?", [cid]).fetchone()
        if row is None or row[1] is None:
            break
        tr = con.execute(
            """SELECT r.round_index, tr.algorithm, tr.num_examples FROM training_runs tr JOIN rounds r USING (round_id)
               WHERE tr.training_run_id = ?""",
            [row[1]],
        ).fetchone()
        if tr is not None:
            sources = con.execute(
                """SELECT coalesce(p.source, te.origin, 'rollout') AS source, count(*) FROM training_examples te
                   LEFT JOIN trajectories t USING (trajectory_id) LEFT JOIN prompts p USING (prompt_id)
                   WHERE te.training_run_id = ? GROUP BY 1 ORDER BY 1""",
                [row[1]],
            ).fetchall()
            runs.append({"round_index": tr[0], "algorithm": tr[1], "num_examples": tr[2], "sources": dict(sources)})
        cid = row[0]
    return runs[::-1]


def model_card(lineage: ModelLineage, base_hub_id: str | None) -> str:
    """``README.md`` for an exported checkpoint: Hub YAML front matter, then the lineage in plain Markdown.

    ``base_hub_id``: the base as a Hub model id (``org/name``) for ``base_model``; None (a local base) leaves it out.
    """
    lin = lineage
    meta: dict = {"library_name": "transformers", "pipeline_tag": "text-generation", "tags": ["ratchet", "rlvr"]}
    if base_hub_id is not None:
        meta["base_model"] = base_hub_id
    if lin.heldout_pass1 is not None:
        meta["model-index"] = [
            {
                "name": f"{lin.campaign}-{lin.checkpoint_id}",
                "results": [
                    {
                        "task": {"type": "text-generation", "name": "verifiable tasks"},
                        "dataset": {"name": f"{lin.campaign} held-out split", "type": f"ratchet/{lin.campaign}"},
                        "metrics": [{"type": "pass@1", "value": round(lin.heldout_pass1, 4), "name": "held-out pass@1 (greedy)"}],
                    }
                ],
            }
        ]
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    promoted = (
        f"round {lin.promoted_in_round}" if lin.promoted_in_round is not None else "never (the base or a rejected candidate)"
    )
    score = (
        f"{lin.heldout_pass1:.4f} on {lin.heldout_prompts} held-out prompts (greedy)"
        if lin.heldout_pass1 is not None
        else "not evaluated"
    )
    lines = [
        f"---\n{front}---\n",
        f"# {lin.campaign} checkpoint {lin.checkpoint_id}\n",
        "Written by `ratchet export --what model` from a Ratchet store (self-improvement rounds on verifiable tasks).\n",
        f"- **Base model:** `{lin.base_model_ref}` (checkpoint `{lin.base_checkpoint_id}`)",
        f"- **Promoted by the gate in:** {promoted}",
        f"- **Held-out pass@1:** {score}\n",
        "## Training runs (base first)\n",
        "| round | algorithm | examples | task sources (examples) |",
        "|---|---|---|---|",
        *(
            f"| {t['round_index']} | {t['algorithm']} | {t['num_examples']} | "
            + ", ".join(f"{_cell(s)} ({n})" for s, n in t["sources"].items())
            + " |"
            for t in lin.training_runs
        ),
        "\n## Gate decisions\n",
        "| round | decision | candidate | candidate pass@1 | incumbent pass@1 | reason |",
        "|---|---|---|---|---|---|",
        *(
            f"| {g['round_index']} | {g['decision']} | {g['candidate'] or ''} | {_num(g['candidate_pass1'])} | "
            f"{_num(g['incumbent_pass1'])} | {_cell(g['reason'])} |"
            for g in lin.gate_decisions
        ),
        "",
    ]
    return "\n".join(lines)


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.4f}"


def _cell(text: str) -> str:
    """``text`` safe in one Markdown table cell: one line, no column separator, at most 300 characters."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= 300 else flat[:297] + "..."
