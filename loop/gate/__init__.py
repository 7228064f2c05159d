"""The gate: promote the candidate, keep the incumbent (reject), or halt the campaign.

Inputs are paired per-prompt scores of candidate and incumbent on the same held-out prompts: greedy
outcomes (0/1, ``gate.samples_per_prompt = 0``) or paired pass@1 estimates, each prompt's mean
correctness over its k sampled completions (``gate.samples_per_prompt = k``; see ``per_prompt_means``).

Modules: ``bounds`` (p-values and lower bounds of the paired difference), ``decision`` (``decide``: one eval set),
``sets`` (a round's eval sets), ``sequential`` (growing the eval set until it decides), ``betting`` (anytime-valid
bounds), ``plan`` (the rule's simulated error rates, eval sizing), ``drift`` (drift from the base), ``pass_at_k`` (the
pass@k guard), ``monitors`` (reward-hacking monitors that halt), ``longrun`` (many nights of decisions, simulated).

The default rule, ``gate.rule = "noninferiority"``, promotes only on evidence. With
delta = pass@1(candidate) - pass@1(incumbent), the candidate is promoted only if all hold:

1. no guard tripped (no-answer rate on held-out <= ``max_no_answer_rate``, training guards; else **halt**);
2. the one-sided (1 - alpha) lower confidence bound of delta vs the incumbent is >= -margin;
3. the same bound vs the best checkpoint ever promoted (the base counts), on its stored per-prompt
   outcomes on the same prompts, is >= -margin, so small losses cannot accumulate round after round.

Both must hold (an intersection-union test, Berger 1982: the chance of promoting a candidate truly more
than ``margin`` worse than either stays <= alpha without a multiplicity correction). The bound for greedy
0/1 outcomes is Tango's score interval for paired proportions (``tango_lower_bound``); for per-prompt
means, a BCa cluster bootstrap over prompts (``bootstrap_lower_bound``). Absence of evidence of a drop
is not evidence of no drop: a small eval set rejects an unproven candidate instead of promoting it.

``gate.rule = "no_detected_drop"`` is the rule of Ratchet <= 0.1 (kept as an explicit option, never the
default): promote unless the point estimate is more than ``margin`` below the incumbent or the best ever
promoted, or the paired test (exact McNemar, or bootstrap) says "worse" at ``alpha``. At 48 prompts it
promoted a candidate truly 5 points worse 39% of the time (``benchmarks/gate_error_rates.py``).

Otherwise the round is rejected; after ``max_consecutive_rejections`` rejections in a row the
decision is **halt**.
"""

from ratchet.loop.gate.bounds import (
    bootstrap_lower_bound,
    bootstrap_worse_p,
    lower_bound,
    mcnemar_worse_p,
    tango_lower_bound,
    tango_z,
)
from ratchet.loop.gate.decision import Decision, GateResult, decide, per_prompt_means

__all__ = [
    "Decision",
    "GateResult",
    "bootstrap_lower_bound",
    "bootstrap_worse_p",
    "decide",
    "lower_bound",
    "mcnemar_worse_p",
    "per_prompt_means",
    "tango_lower_bound",
    "tango_z",
]
