"""Which training prompts a round samples: by seed alone (``uniform``) or by pass-rate history (``frontier``).

Pure functions over what the store already knows (``ratchet.store.prompt_history.prompt_history``); nothing here reads
the store or a model, so the choice is a function of the candidates, the history and the seed alone.

The estimate (conjugate Beta-Binomial, Gelman et al., *Bayesian Data Analysis* 3rd ed. s2.4, with an empirical-Bayes
prior): a prompt whose source and task (arithmetic level, file task) passed ``c_g`` of ``n_g`` recent rollouts has
the prior ``Beta(m s, (1 - m) s)`` with ``m = (c_g + 1) / (n_g + 2)`` (Laplace's rule) and ``s`` pseudo-rollouts
(``tasks.selection_prior_strength``); after its own ``c`` of ``n`` the posterior is

    p ~ Beta(alpha, beta),  alpha = m s + c,  beta = (1 - m) s + n - c,  E[p] = alpha / (alpha + beta).

The score is the probability that a group of ``G`` rollouts of the prompt holds both a right and a wrong answer,
i.e. that its rewards vary (GRPO: a non-zero advantage; DAPO drops the others, Yu et al. 2025 s3.2; RFT: a solution
of a prompt not always solved), under that posterior, with the Beta's raw moments
``E[p^G] = prod_{i<G} (alpha + i) / (alpha + beta + i)``:

    informative = 1 - E[p^G] - E[(1 - p)^G].

It is largest for estimates near 1/2 and shrinks towards 0 for prompts known solved or unsolved, more slowly for
prompts seen rarely (their estimate is uncertain), which is what "neither ~0 nor ~1" means for a finite group.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ratchet.loop.config import TaskConfig
from ratchet.loop.tasks.sources import Prompt, normalize_question
from ratchet.loop.tasks.task_sets import TaskSet, apportion, sub_seed

Counts = tuple[int, int]  # (rollouts, correct)


@dataclass(frozen=True)
class History:
    """Recent verdicts of the incumbent's lineage: per prompt id and per (source, task), ``(rollouts, correct)``."""

    prompts: Mapping[str, Counts]
    groups: Mapping[tuple[str, str], Counts]

    @classmethod
    def empty(cls) -> History:
        return cls({}, {})


@dataclass(frozen=True)
class Choice:
    """One candidate prompt with its estimate and why it was (or could be) picked.

    Attributes:
        prompt: the candidate.
        pick: ``uniform`` (drawn by seed), ``frontier`` (highest informative score), ``explore`` (drawn uniformly
            from the rest at ``tasks.selection_explore``) or ``reserve`` (a refill candidate, ranked by score).
        estimate: posterior mean pass rate E[p] in [0, 1].
        alpha, beta: the Beta posterior's parameters (> 0).
        seen: the prompt's own ``(rollouts, correct)`` in the history.
        informative: P(a group of G has mixed outcomes) under the posterior, in [0, 1].
    """

    prompt: Prompt
    pick: str
    estimate: float
    alpha: float
    beta: float
    seen: Counts
    informative: float


def prior_mean(counts: Counts | None) -> float:
    """Laplace's rule ``(c + 1) / (n + 2)`` of a source and task's recent ``(rollouts, correct)``; 1/2 when unseen."""
    n, c = counts or (0, 0)
    return (c + 1) / (n + 2)


def posterior(seen: Counts, mean: float, strength: float) -> tuple[float, float]:
    """``(alpha, beta)`` of the Beta posterior after ``seen = (n, c)`` from the prior ``Beta(mean s, (1 - mean) s)``.

    Raises:
        ValueError: ``mean`` outside (0, 1), ``strength`` <= 0, or counts with ``c > n`` / negative.
    """
    n, c = seen
    if not 0.0 < mean < 1.0 or strength <= 0:
        raise ValueError(f"prior mean ({mean}) must be in (0, 1) and strength ({strength}) > 0")
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"counts (rollouts {n}, correct {c}) need 0 <= correct <= rollouts")
    return mean * strength + c, (1.0 - mean) * strength + (n - c)


def informative_probability(alpha: float, beta: float, group_size: int) -> float:
    """P(a group of ``group_size`` Bernoulli(p) rollouts is neither all right nor all wrong), p ~ Beta(alpha, beta).

    ``1 - E[p^G] - E[(1-p)^G]`` with ``E[p^G] = prod_{i<G} (alpha + i) / (alpha + beta + i)`` (the Beta's raw moments).

    Raises:
        ValueError: ``group_size`` < 1 or a non-positive parameter.
    """
    if group_size < 1 or alpha <= 0 or beta <= 0:
        raise ValueError(f"group_size ({group_size}) must be >= 1 and alpha ({alpha}), beta ({beta}) > 0")
    all_right = math.prod((alpha + i) / (alpha + beta + i) for i in range(group_size))
    all_wrong = math.prod((beta + i) / (alpha + beta + i) for i in range(group_size))
    return max(0.0, 1.0 - all_right - all_wrong)


def estimate(p: Prompt, history: History, group_size: int, strength: float, pick: str) -> Choice:
    """The posterior of one candidate under ``history`` (module docstring) as a ``Choice`` labelled ``pick``."""
    seen = history.prompts.get(p.prompt_id, (0, 0))
    a, b = posterior(seen, prior_mean(history.groups.get((p.source, p.task))), strength)
    return Choice(p, pick, a / (a + b), a, b, seen, informative_probability(a, b, group_size))


def _tiebreak(seed: int, prompt_id: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{prompt_id}".encode()).hexdigest()


def rank_uniform(candidates: Sequence[Prompt], history: History, group_size: int, strength: float) -> list[Choice]:
    """The candidates in their seeded draw order, each with its estimate (so a uniform round's choice is explained too)."""
    return [estimate(p, history, group_size, strength, "uniform") for p in candidates]


def rank_frontier(
    candidates: Sequence[Prompt],
    k: int,
    history: History,
    *,
    group_size: int,
    explore: float,
    seed: int,
    strength: float,
) -> list[Choice]:
    """Rank the candidates for ``k`` slots: ``k - e`` by informative score, ``e = round(explore k)`` drawn uniformly
    (seeded) from the rest, then every other candidate by score as ``reserve`` (the order refills take them in).

    Deterministic in (candidates, history, seed): ties break on sha256(seed, prompt id), never on input order.

    Returns:
        Every distinct candidate once; the first ``min(k, len(candidates))`` are the picked ones.
    Raises:
        ValueError: ``explore`` outside [0, 1] or ``k`` < 0.
    """
    if not 0.0 <= explore <= 1.0 or k < 0:
        raise ValueError(f"explore ({explore}) must be in [0, 1] and k ({k}) >= 0")
    unique = list({p.prompt_id: p for p in candidates}.values())
    scored = [estimate(p, history, group_size, strength, "frontier") for p in unique]
    scored.sort(key=lambda c: (-round(c.informative, 12), _tiebreak(seed, c.prompt.prompt_id)))
    k = min(k, len(scored))
    n_explore = min(round(explore * k), len(scored) - (k - round(explore * k)))
    top, rest = scored[: k - n_explore], scored[k - n_explore :]
    rng = random.Random(seed)
    picked = sorted(rng.sample(range(len(rest)), n_explore))
    explored = [_relabel(rest[i], "explore") for i in picked]
    taken = set(picked)
    reserve = [_relabel(c, "reserve") for i, c in enumerate(rest) if i not in taken]
    return top + explored + reserve


def _relabel(c: Choice, pick: str) -> Choice:
    return Choice(c.prompt, pick, c.estimate, c.alpha, c.beta, c.seen, c.informative)


def histogram(estimates: Sequence[float], bins: int = 5) -> list[int]:
    """Counts of ``estimates`` (pass rates in [0, 1]) in ``bins`` equal bins; the last bin includes 1."""
    out = [0] * bins
    for e in estimates:
        out[min(int(e * bins), bins - 1)] += 1
    return out


@dataclass(frozen=True)
class Slot:
    """A round's candidate with the on-policy step that samples it: a picked prompt of that step's share, or a
    ``reserve`` prompt that step may draw to refill a dropped group (``grpo.max_oversample``)."""

    step: int
    choice: Choice


def round_slots(
    tasks: TaskSet,
    t: TaskConfig,
    *,
    seed: int,
    evals: Sequence[Prompt],
    history: History,
    group_size: int,
    steps: int,
    reserve: int,
) -> list[Slot]:
    """Every prompt a round may sample, with the step that samples it: ``t.train_prompts_per_round`` picked ones
    (split over ``steps`` in order, as ``Ctx.train_prompts`` splits them) and up to ``reserve`` refill candidates
    (dealt to the steps in turn: a step refills from its own slots only, so at most ``reserve`` in all). Each source gets its weight's share of both (``apportion``).

    ``uniform`` with ``reserve = 0`` picks exactly ``TaskSet.draw(n, "train", seed)`` minus evaluation questions.
    No prompt whose normalized question is an evaluation question is ever a slot.
    """
    banned = {normalize_question(p.question) for p in evals}
    n = t.train_prompts_per_round
    weights = [m.weight for m in tasks.members]
    picked: list[Choice] = []
    spare: list[Choice] = []
    for m, k, r in zip(tasks.members, apportion(n, weights), apportion(reserve, weights)):
        if not k and not r:
            continue
        want = k * (t.selection_candidates if t.selection == "frontier" else 1) + r
        drawn = m.source.draw(want, "train", sub_seed(seed, "source", m.name) if len(tasks.members) > 1 else seed)
        drawn = [p for p in drawn if normalize_question(p.question) not in banned]
        G = m.group_size or group_size
        if t.selection == "frontier":
            ranked = rank_frontier(
                drawn, k, history, group_size=G, explore=t.selection_explore, seed=seed, strength=t.selection_prior_strength
            )
        else:
            ranked = rank_uniform(drawn, history, G, t.selection_prior_strength)
        head = min(k, len(ranked))
        picked += ranked[:head]
        spare += [_relabel(c, "reserve") for c in ranked[head : head + r]]
    if t.selection == "frontier":  # the best refills first, whatever their source
        spare.sort(key=lambda c: (-round(c.informative, 12), _tiebreak(seed, c.prompt.prompt_id)))
    n_picked = len(picked)
    slots = [Slot(s, c) for s in range(steps) for c in picked[s * n_picked // steps : (s + 1) * n_picked // steps]]
    return slots + [Slot(i % steps, c) for i, c in enumerate(spare[:reserve])]


def refill(
    first: Sequence[Choice], reserve: Sequence[Choice], signal: Callable[[list[Choice]], list[bool]]
) -> list[tuple[Choice, int]]:
    """DAPO dynamic sampling with refill (Yu et al. 2025, s3.2): sample ``first``, then, while fewer of the sampled
    groups carry signal than ``len(first)``, sample that many more prompts from ``reserve`` (in order).

    ``signal(batch, refill_pass)`` samples and verifies the batch's groups (pass 0: ``first``) and says, per prompt,
    whether its rewards vary (a
    zero-variance group is dropped by ``grpo.dynamic_sampling``). It ends when the batch is full or the reserve is
    spent, so at most ``len(reserve)`` prompts are refilled, and the kept groups never exceed ``len(first)``.

    Returns:
        every sampled choice with its refill pass (0: ``first``; k: the k-th refill), in sampling order.
    """
    taken = [(c, 0) for c in first]
    kept, pos, k = sum(signal(list(first), 0)), 0, 0
    while kept < len(first) and pos < len(reserve):
        batch = list(reserve[pos : pos + len(first) - kept])
        pos, k = pos + len(batch), k + 1
        kept += sum(signal(batch, k))
        taken += [(c, k) for c in batch]
    return taken
