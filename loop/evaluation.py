"""Held-out metrics: greedy pass@1 and the unbiased pass@k estimator."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct.

    pass@k = 1 - C(n-c, k) / C(n, k)  (Chen et al. 2021, "Evaluating LLMs trained on code", eq. 1),
    computed as the stable product 1 - prod_{i=n-c+1}^{n} (1 - k/i).

    Raises:
        ValueError: ``k`` not in [1, n] or ``c`` not in [0, n].
    """
    if not 1 <= k <= n:
        raise ValueError(f"k ({k}) must be in [1, n={n}]; draw at least k samples per prompt")
    if not 0 <= c <= n:
        raise ValueError(f"c ({c}) must be in [0, n={n}]")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


@dataclass(frozen=True)
class PromptOutcome:
    """Per held-out prompt: greedy correctness, and (n, c) of sampled completions (0, 0 if none)."""

    prompt_id: str
    greedy_correct: bool
    greedy_answered: bool
    n: int = 0
    c: int = 0


def summarize(outcomes: Sequence[PromptOutcome], ks: Sequence[int]) -> dict[str, float]:
    """Metrics over held-out prompts: ``heldout/pass@1`` (greedy), ``heldout/no_answer_rate`` and,
    when samples exist, ``heldout/pass@k`` for each k (mean over prompts of the unbiased estimator)."""
    if not outcomes:
        raise ValueError("no held-out outcomes to summarize; the held-out set is empty")
    m = len(outcomes)
    out = {
        "heldout/pass@1": sum(o.greedy_correct for o in outcomes) / m,
        "heldout/no_answer_rate": sum(not o.greedy_answered for o in outcomes) / m,
    }
    if all(o.n > 0 for o in outcomes):
        for k in ks:
            out[f"heldout/sampled_pass@{k}"] = sum(pass_at_k(o.n, o.c, k) for o in outcomes) / m
    return out


def eval_set_id(prompt_ids: Sequence[str], settings: dict) -> str:
    """Identity of an evaluation: the sorted held-out prompt ids and the decoding settings."""
    blob = json.dumps({"prompts": sorted(prompt_ids), "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
