"""Held-out metrics: greedy pass@1, the unbiased pass@k estimator, and test-time metrics (maj@k, best-of-n)."""

from __future__ import annotations

import hashlib
import json
import math
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


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (E. B. Wilson 1927, "Probable inference, the law of
    succession, and statistical inference", JASA 22): ``(p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)``, with
    ``p = successes / n``; ``z`` defaults to the two-sided 95 % normal quantile. Unlike ``p ± z sqrt(p(1-p)/n)`` it
    stays inside [0, 1] and does not collapse to a point at 0/n or n/n.

    Raises:
        ValueError: ``n < 1`` or ``successes`` not in [0, n].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"successes ({successes}) must be in [0, n] and n ({n}) >= 1")
    p, z2 = successes / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


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


@dataclass(frozen=True)
class Sample:
    """One sampled completion of a prompt as the verifier judged it.

    Attributes:
        parsed: canonical text of the parsed final answer (``verdicts.parsed``), None when none was extracted.
        correct: the verifier's outcome (``verdicts.correct``).
        reward: the composite reward (``verdicts.reward``).
    """

    parsed: str | None
    correct: bool
    reward: float


def majority_correct(samples: Sequence[Sample]) -> bool:
    """maj@k of one prompt: is the most frequent parsed answer among ``samples`` (k of them) judged correct?

    Self-consistency (Wang et al. 2023): vote over the parsed answers; samples without one abstain.
    A tie between answers goes to the answer whose first vote came earliest (lowest sample index), so
    the result depends only on the samples' order. The majority answer is correct iff its earliest
    sample was judged correct (equal parsed answers get equal verdicts from one verifier version).
    False when no sample has an answer.
    """
    votes: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, s in enumerate(samples):
        if s.parsed is None:
            continue
        votes[s.parsed] = votes.get(s.parsed, 0) + 1
        first.setdefault(s.parsed, i)
    if not votes:
        return False
    winner = min(votes, key=lambda a: (-votes[a], first[a]))
    return samples[first[winner]].correct


def best_of_n_correct(samples: Sequence[Sample]) -> bool:
    """best-of-n of one prompt: is the highest-reward sample among ``samples`` (n of them) correct?

    The reward is the composite one (outcome + format + language terms), i.e. an oracle verifier used
    as the reranker, so best-of-n equals pass@n when the outcome dominates the reward. Ties go to the
    lowest sample index. False for no samples.
    """
    if not samples:
        return False
    best = max(range(len(samples)), key=lambda i: (samples[i].reward, -i))
    return samples[best].correct


def pass_at_k_curve(counts: Sequence[tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean unbiased pass@k over prompts for each k, from per-prompt ``(n, c)`` (n samples, c correct).

    Plot base vs trained on the same k axis: RL that only sharpens the base's distribution raises pass@1
    and lowers large-k pass@k (Yue et al. 2025, "Does RL really incentivize reasoning capacity...").

    Raises:
        ValueError: no prompts, or a k larger than some prompt's n (see ``pass_at_k``).
    """
    if not counts:
        raise ValueError("no prompts for a pass@k curve; evaluate at least one prompt")
    return {k: sum(pass_at_k(n, c, k) for n, c in counts) / len(counts) for k in ks}


def sampled_metrics(per_prompt: Sequence[Sequence[Sample | tuple]], ks: Sequence[int]) -> dict[str, float]:
    """Test-time-compute metrics over held-out prompts from their sampled completions.

    Args:
        per_prompt: for each prompt, its samples in sample-index order, each a ``Sample`` or a
            ``(parsed, correct, reward)`` tuple (as ``verdicts`` stores them).
        ks: budgets; each must be <= every prompt's sample count.

    Returns:
        ``heldout/maj@k`` (vote over the first k samples), ``heldout/best_of_n@k`` (best reward among
        the first k) and ``heldout/sampled_pass@k`` (unbiased estimator over all n samples), for each k:
        means over prompts in [0, 1].

    Raises:
        ValueError: no prompts, a k < 1, or a prompt with fewer than max(ks) samples (the message says
            which and how to fix it).
    """
    if not per_prompt:
        raise ValueError("no held-out prompts for test-time metrics; the held-out set is empty")
    prompts = [[s if isinstance(s, Sample) else Sample(*s) for s in samples] for samples in per_prompt]
    fewest = min(len(p) for p in prompts)
    bad = [k for k in ks if not 1 <= k <= fewest]
    if bad:
        raise ValueError(
            f"k={bad[0]} needs 1 <= k <= the fewest samples of a prompt ({fewest}); raise eval.num_samples or drop k={bad[0]}"
        )
    m = len(prompts)
    curve = pass_at_k_curve([(len(p), sum(s.correct for s in p)) for p in prompts], ks)
    out: dict[str, float] = {}
    for k in ks:
        out[f"heldout/maj@{k}"] = sum(majority_correct(p[:k]) for p in prompts) / m
        out[f"heldout/best_of_n@{k}"] = sum(best_of_n_correct(p[:k]) for p in prompts) / m
        out[f"heldout/sampled_pass@{k}"] = curve[k]
    return out
