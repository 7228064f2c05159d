"""What the gate compares, read from the store: each eval set's paired per-prompt scores of candidate, incumbent
and best checkpoint ever promoted. Shared by the round's gate stage and ``ratchet gate replay``, so a replay
decides on exactly the outcomes a round did."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ratchet.loop.config import GateConfig, RatchetConfig
from ratchet.loop.gate import drift as gate_drift
from ratchet.loop.gate import per_prompt_means
from ratchet.loop.gate.eval_sets import RoundGate, SetScores, decide_sets
from ratchet.loop.gate.monitors import MONITORS
from ratchet.loop.gate.pass_at_k import PassAtKCheck, PassAtKScores, per_prompt_pass_at_k
from ratchet.loop.gate.sequential import run_sequential
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
    verifier_version: str, gate: GateConfig, *, prompts: int | None = None,
) -> tuple[list[SetScores], dict[str, str | None], str | None]:  # fmt: skip
    """Each eval set's scores for one round, its best promoted checkpoint id, and a note when a promoted checkpoint
    could not be compared (no stored outcomes on this eval set, e.g. evaluated under another verifier version).

    Every set also carries the base checkpoint's scores on it (``SetScores.base``, the drift measure). With
    ``gate.sequential`` the candidate may cover only the first prompts of the eval set (prompt-id order; ``prompts``:
    only the first that many), the incumbent must cover those, and a promoted checkpoint evaluated on fewer is
    compared on the prompts both have (``SetScores.best_candidate``).

    Raises:
        RuntimeError: candidate and incumbent were evaluated on different prompts.
    """
    k = gate.samples_per_prompt
    cand = eval_outcomes(con, candidate, eval_set_id, verifier_version)[:prompts]
    ids = [o["prompt_id"] for o in cand]
    inc_all = eval_outcomes(con, incumbent, eval_set_id, verifier_version)
    inc = _on(inc_all, ids) if gate.sequential else inc_all
    if inc is None or [o["prompt_id"] for o in inc] != ids or not ids:
        raise RuntimeError(
            f"candidate and incumbent were evaluated on different prompts (eval set {eval_set_id}); re-run the evaluate stage"
        )
    members = eval_set_members(con, campaign_id)
    key = [grouping.key(*members.get(p, ("heldout", "unknown"))) for p in ids]
    promoted = promoted_before(con, campaign_id, round_index)
    others, skipped = {}, []
    for c in promoted:
        if c in (incumbent, candidate) or c in others:
            continue
        got = {o["prompt_id"]: o for o in eval_outcomes(con, c, eval_set_id, verifier_version)}
        if all(p in got for p in ids) or (gate.sequential and any(p in got for p in ids)):
            others[c] = got
        else:
            skipped.append(c)
    pool = {incumbent: {o["prompt_id"]: o for o in inc}, **others}
    sets, best_ids = [], {}
    for name in dict.fromkeys(key):
        idx = [i for i, x in enumerate(key) if x == name]
        cand_out = [cand[i] for i in idx]
        cand_scores = scores(cand_out, k)
        sub = {c: _paired(outs, [ids[i] for i in idx], cand_scores, k) for c, outs in pool.items()}
        sub = {c: v for c, v in sub.items() if v is not None}
        best_id = max(sub, key=lambda c: sum(sub[c][0]) / len(sub[c][0]))
        best, best_cand = sub[best_id]
        base = sub.get(promoted[0])
        sets.append(
            SetScores(
                name=name,
                role=grouping.roles.get(name, "gate"),
                candidate=cand_scores,
                incumbent=sub[incumbent][0],
                best=None if best_id == incumbent else best,
                best_pass1=sum(best) / len(best),
                candidate_no_answer_rate=sum(not o["greedy_answered"] for o in cand_out) / len(idx),
                best_candidate=None if best_id == incumbent or len(best) == len(idx) else best_cand,
                base=None if base is None else base[0],
                base_candidate=None if base is None or len(base[0]) == len(idx) else base[1],
                pass_k=_pass_k(gate.pass_at_k, cand_out, pool[incumbent], pool.get(promoted[0])),
            )
        )
        best_ids[name] = best_id
    note = f"not compared (no outcomes on eval set {eval_set_id}): {', '.join(skipped)}" if skipped else None
    return sets, best_ids, note


def _pass_k(k: int | None, cand_out: list[dict], inc: dict[str, dict], base: dict[str, dict] | None) -> PassAtKScores | None:
    """The set's paired per-prompt pass@k estimates (``gate.pass_at_k``; None when off): the incumbent on the
    candidate's prompts, the base on those of them where it has at least k samples (none: not compared).

    Raises:
        ValueError: the candidate or the incumbent has fewer than k samples on a prompt (``per_prompt_pass_at_k``).
    """
    if not k:
        return None
    ids = [o["prompt_id"] for o in cand_out]
    est = lambda outs: per_prompt_pass_at_k([(o["n"], o["c"]) for o in outs], k)  # noqa: E731
    cand = est(cand_out)
    on_base = [i for i, p in enumerate(ids) if base is not None and p in base and base[p]["n"] >= k]
    return PassAtKScores(
        k, cand, est([inc[p] for p in ids]),
        base=est([base[ids[i]] for i in on_base]) if on_base else None,
        base_candidate=[cand[i] for i in on_base] if on_base and len(on_base) < len(ids) else None,
    )  # fmt: skip


def _on(outcomes: list[dict], ids: list[str]) -> list[dict] | None:
    """``outcomes`` on exactly ``ids`` (in that order), or None when one is missing."""
    by = {o["prompt_id"]: o for o in outcomes}
    return [by[p] for p in ids] if all(p in by for p in ids) else None


def _paired(outs: dict[str, dict], ids: list[str], cand_scores: list[float], k: int):
    """``(scores, candidate's scores)`` of one checkpoint on the prompts of ``ids`` it has outcomes on (None: none)."""
    have = [i for i, p in enumerate(ids) if p in outs]
    if not have:
        return None
    return scores([outs[ids[i]] for i in have], k), [cand_scores[i] for i in have]


@dataclass(frozen=True)
class Decided:
    """A round's gate decision from the stored outcomes, with what it compared (``decide_stored``)."""

    gate: RoundGate
    sets: list[SetScores]
    best_ids: dict[str, str | None]
    note: str | None
    drifts: list[gate_drift.Drift]
    prompts_used: int | None = None  # sequential gate: prompts of the sequential order it used
    looks: int | None = None
    stop: str | None = None  # sequential gate: why it stopped (ratchet.loop.gate.sequential.STOPS)


def decision_columns(d: Decided) -> dict:
    """The ``gate_decisions`` columns of the sequential gate and the drift check (NULL when they did not run)."""
    w = gate_drift.worst(d.drifts)
    return dict(
        eval_prompts_used=d.prompts_used,
        sequential_looks=d.looks,
        sequential_stop=d.stop,
        drift=None if w is None else w.change,
        drift_upper_bound=None if w is None else w.upper_bound,
        drift_set=None if w is None else w.name,
    )


def pass_at_k_columns(chk: PassAtKCheck | None) -> dict:
    """The ``gate_set_decisions`` columns of a set's pass@k guard (empty when it did not run)."""
    if chk is None:
        return {}
    return dict(
        pass_at_k=chk.k, candidate_pass_at_k=chk.candidate, incumbent_pass_at_k=chk.incumbent, base_pass_at_k=chk.base,
        pass_at_k_lower_bound=chk.lower_bound, pass_at_k_base_lower_bound=chk.base_lower_bound,
    )  # fmt: skip


def base_pass1(d: Decided) -> dict[str, float | None]:
    """Each eval set's base checkpoint pass@1 on the prompts it was compared on (``gate_set_decisions.base_pass1``)."""
    return {s.name: None if s.base is None else sum(s.base) / len(s.base) for s in d.sets}


def sequential_total(gate: GateConfig, pinned: int) -> int:
    """The most eval prompts a sequential gate evaluates: ``gate.max_eval_prompts``, capped by the pinned eval set."""
    return min(gate.max_eval_prompts, pinned)


def decide_stored(
    con, grouping: Grouping, campaign_id: str, round_index: int, eval_set_id: str, incumbent: str, candidate: str,
    verifier_version: str, gate: GateConfig, *, consecutive_rejections: int, tripped_guards: list[str], pinned: int,
) -> Decided:  # fmt: skip
    """Decide a round on its stored per-prompt outcomes (no model calls): every eval set (``decide_sets``), or under
    ``gate.sequential`` the looks of ``run_sequential`` over the prompts evaluated (the same looks the round took,
    since they depend only on the outcomes), then the drift check (``ratchet.loop.gate.drift``). ``pinned``: the
    eval set's size. Shared by the gate stage and ``ratchet gate replay``.

    Raises:
        RuntimeError: as ``build_sets``.
    """
    args = (con, grouping, campaign_id, round_index, eval_set_id, incumbent, candidate, verifier_version, gate)
    got: dict[int | None, tuple] = {}

    def sets_at(n: int | None) -> list[SetScores]:
        got[n] = build_sets(*args, prompts=n)
        return got[n][0]

    seq = None
    if gate.sequential:
        pinned = pinned or len(eval_outcomes(con, candidate, eval_set_id, verifier_version))  # a store without pins
        seq = run_sequential(
            sets_at, gate, total=sequential_total(gate, pinned), consecutive_rejections=consecutive_rejections,
            tripped_guards=tripped_guards,
        )  # fmt: skip
        res, (sets, best_ids, note) = seq.gate, got[seq.prompts_used]
    else:
        sets, best_ids, note = build_sets(*args)
        res = decide_sets(sets, gate, consecutive_rejections=consecutive_rejections, tripped_guards=tripped_guards)
    drifts = gate_drift.measure(sets, gate)
    res = gate_drift.apply(res, drifts, gate)
    if seq is None:
        return Decided(res, sets, best_ids, note, drifts)
    return Decided(res, sets, best_ids, note, drifts, seq.prompts_used, seq.looks, seq.stop)


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


NO_MONITORS = {name: None for name in MONITORS}  # every monitor only measured (a decision made before they existed)


def stored_gate_config(row: dict) -> GateConfig:
    """The ``[gate]`` a stored decision ran with: its ``settings_json``, else (decided before that was recorded) the old
    rule with the row's test and tolerance over the campaign's stored gate section."""
    if row.get("settings_json"):
        settings = json.loads(row["settings_json"])
        settings.setdefault("max_drift", None)  # decided before the drift check existed: without it
        settings.setdefault("monitors", NO_MONITORS)  # decided before the monitors existed: without them
        return GateConfig.model_validate(settings)
    old = dict(json.loads(row["config_json"]).get("gate") or {})
    old.pop("tolerance", None)
    old["monitors"] = NO_MONITORS
    old.update(rule="no_detected_drop", margin=row["tolerance"], test=row["test"] if row["test"] != "score" else "mcnemar")
    return GateConfig.model_validate(old)
