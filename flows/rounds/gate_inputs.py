"""What the gate compares, read from the store: each eval set's paired per-prompt scores of candidate, incumbent
and best checkpoint ever promoted. Shared by the round's gate stage and ``ratchet gate replay``, so a replay
decides on exactly the outcomes a round did."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ratchet.loop.config import GateConfig, RatchetConfig
from ratchet.loop.gate import per_prompt_means
from ratchet.loop.gate.sets import SetScores
from ratchet.store.queries import eval_outcomes, eval_set_members, promoted_before


def scores(outcomes: list[dict], k: int) -> list[float]:
    """Per-prompt gate scores: greedy correctness (k = 0) or the mean correctness of the eval samples (k >= 2)."""
    if not k:
        return [float(o["greedy_correct"]) for o in outcomes]
    return per_prompt_means([(o["n"], o["c"]) for o in outcomes], k)


@dataclass(frozen=True)
class Grouping:
    """How a campaign's eval prompts split into gated sets: by [[evals]] entry (``roles``: name -> role), else by
    task source when it has several, else one 'heldout' set."""

    roles: dict[str, str]
    by_source: bool

    @classmethod
    def of(cls, cfg: RatchetConfig | dict) -> Grouping:
        """From a config, or from a campaign's stored settings (``campaigns.config_json``)."""
        if isinstance(cfg, RatchetConfig):
            return Grouping({e.name: e.role for e in cfg.evals}, not cfg.evals and len(cfg.tasks.sources) > 1)
        evals = cfg.get("evals") or []
        sources = (cfg.get("tasks") or {}).get("sources") or []
        return Grouping({e["name"]: e.get("role", "gate") for e in evals}, not evals and len(sources) > 1)

    def key(self, eval_name: str, source: str) -> str:
        return source if self.by_source else eval_name


def build_sets(
    con, grouping: Grouping, campaign_id: str, round_index: int, eval_set_id: str, incumbent: str, candidate: str,
    verifier_version: str, gate: GateConfig,
) -> tuple[list[SetScores], dict[str, str | None], str | None]:  # fmt: skip
    """Each eval set's scores for one round, its best promoted checkpoint id, and a note when a promoted checkpoint
    could not be compared (no stored outcomes on this eval set, e.g. evaluated under another verifier version).

    Raises:
        RuntimeError: candidate and incumbent were evaluated on different prompts.
    """
    k = gate.samples_per_prompt
    inc, cand = (eval_outcomes(con, c, eval_set_id, verifier_version) for c in (incumbent, candidate))
    ids = [o["prompt_id"] for o in inc]
    if [o["prompt_id"] for o in cand] != ids or not ids:
        raise RuntimeError(
            f"candidate and incumbent were evaluated on different prompts (eval set {eval_set_id}); re-run the evaluate stage"
        )
    members = eval_set_members(con, campaign_id)
    key = [grouping.key(*members.get(p, ("heldout", "unknown"))) for p in ids]
    others, skipped = {}, []
    for c in promoted_before(con, campaign_id, round_index):
        if c in (incumbent, candidate) or c in others:
            continue
        got = eval_outcomes(con, c, eval_set_id, verifier_version)
        if [o["prompt_id"] for o in got] == ids:
            others[c] = got
        else:
            skipped.append(c)
    pool = {incumbent: inc, **others}
    role = grouping.roles
    sets, best_ids = [], {}
    for name in dict.fromkeys(key):
        idx = [i for i, x in enumerate(key) if x == name]
        sub = {c: scores([outs[i] for i in idx], k) for c, outs in pool.items()}
        best_id = max(sub, key=lambda c: sum(sub[c]))
        cand_out = [cand[i] for i in idx]
        sets.append(
            SetScores(
                name=name,
                role=role.get(name, "gate"),
                candidate=scores(cand_out, k),
                incumbent=sub[incumbent],
                best=None if best_id == incumbent else sub[best_id],
                best_pass1=sum(sub[best_id]) / len(idx),
                candidate_no_answer_rate=sum(not o["greedy_answered"] for o in cand_out) / len(idx),
            )
        )
        best_ids[name] = best_id
    note = f"not compared (no outcomes on eval set {eval_set_id}): {', '.join(skipped)}" if skipped else None
    return sets, best_ids, note


def training_guards(
    m: dict | None, algorithm: str, max_kl: float, min_entropy: float, max_sampler_gap: float | None = None
) -> list[str]:
    """Guard metrics of a round's training pass (``training_metrics``) that halt the campaign: KL drift, entropy
    collapse, and (with ``max_sampler_gap``, nats per token) an engine sampling from another policy than the trained one."""
    if m is None or algorithm != "grpo":
        return []
    out = []
    # Where the policy ended up (last optimizer step), with the importance-weighted KL estimate: the raw
    # k3 mean over tokens sampled before the update is dominated by the few tokens the update pushed down.
    kl, ent = m.get("train/kl_last", m.get("train/kl/mean", 0.0)), m.get("train/entropy_last", m.get("train/entropy/mean"))
    if kl > max_kl:
        out.append(f"guard: KL to the reference {kl:.3f} > grpo.max_kl {max_kl}")
    if ent is not None and ent < min_entropy:
        out.append(f"guard: token entropy {ent:.4f} < grpo.min_entropy {min_entropy} (collapse)")
    gap = m.get("train/sampler_gap_last")
    if max_sampler_gap is not None and gap is not None and gap > max_sampler_gap:
        out.append(f"guard: sampler/trainer log-prob gap {gap:.3f} > grpo.max_sampler_gap {max_sampler_gap} (stale engine?)")
    return out


def stored_gate_config(row: dict) -> GateConfig:
    """The ``[gate]`` a stored decision ran with: its ``settings_json``, else (decided before that was recorded) the old
    rule with the row's test and tolerance over the campaign's stored gate section."""
    if row.get("settings_json"):
        return GateConfig.model_validate(json.loads(row["settings_json"]))
    old = dict(json.loads(row["config_json"]).get("gate") or {})
    old.pop("tolerance", None)
    old.update(rule="no_detected_drop", margin=row["tolerance"], test=row["test"] if row["test"] != "score" else "mcnemar")
    return GateConfig.model_validate(old)
