"""The pilot's findings: what a few base-model samples say will waste a campaign's first round.

Before a campaign's first round, ``ratchet run`` samples a few train prompts with the model that will generate
(``ratchet.flows.rounds.pilot``), at the round's sampling settings and cap; when many are cut it samples them again
with a longer cap (``probe_cap``) to see which cap would fit. This module turns those samples and their verdicts
into one line per problem; it generates nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.loop.evaluation.metrics import wilson_interval
from ratchet.loop.generation.sampling import Completion
from ratchet.loop.train.lengths import AUTO_FACTOR

PROBE_FACTOR = 4  # cut completions are sampled again with up to 4 x the round's cap, to see how long they wanted to be
PROBE_MAX_TOKENS = 512  # ... bounded: that second sample runs to its cap while any sequence rambles
TRUNCATED_SHARE = 0.25  # warn when at least this share of the pilot's completions would be cut at the round's cap
UNPARSED = ("no_answer", "parse_error", "ambiguous")  # verdict reasons that mean no answer could be read
FEW_RATE = 0.10  # a base pass rate below this leaves a round few verified-correct rollouts (RFT) or varied groups (GRPO)
WRONG_WARNING = 0.10  # the 'nothing to train on' warning may be wrong (a true rate >= FEW_RATE) at most this often


def pilot_samples(rate: float = FEW_RATE, error: float = WRONG_WARNING) -> int:
    """Samples the pilot draws at least so that a true pass rate of ``rate`` shows no correct sample at most ``error``
    of the time: ``ceil(log(error) / log(1 - rate))`` (P(0 of n) = (1 - rate)^n); 22 at the defaults."""
    return math.ceil(math.log(error) / math.log(1 - rate))


def rate_upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided exact (Clopper-Pearson, 1934) upper bound on a pass rate after ``k`` correct of ``n``: the rate at
    which P(X <= k) = 1 - ``confidence`` for X ~ Binomial(n, rate), by bisection (0 of n: 1 - (1 - confidence)^(1/n)).

    Raises:
        ValueError: ``n`` < 1 or ``k`` outside [0, n].
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"rate_upper_bound needs 0 <= k <= n and n >= 1 (got k={k}, n={n})")
    if k == n:
        return 1.0
    cdf = lambda p: sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))  # noqa: E731
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) > 1 - confidence else (lo, mid)
    return hi


def probe_cap(cap: int) -> int:
    """The second sample's completion cap, tokens: ``PROBE_FACTOR`` x the round's ``cap``, at most
    ``PROBE_MAX_TOKENS`` (never below ``cap``)."""
    return max(cap, min(PROBE_FACTOR * cap, PROBE_MAX_TOKENS))


def fitting_cap(comps: Sequence[Completion]) -> int | None:
    """A cap that cuts few of ``comps``: ``ceil(1.2 x P90)`` of their lengths (the 'auto' rule of
    ``ratchet.loop.train.lengths``); None when more than 10% did not stop within the cap they were sampled with."""
    lengths = sorted(len(c.token_ids) if c.finish_reason == "stop" else math.inf for c in comps)
    if not lengths:
        return None
    p90 = lengths[min(len(lengths) - 1, math.ceil(0.9 * len(lengths)) - 1)]  # nearest-rank P90
    return None if p90 == math.inf else math.ceil(AUTO_FACTOR * p90)


@dataclass(frozen=True)
class PilotResult:
    """The pilot's samples, scored at the round's cap.

    Attributes:
        prompts: train prompts sampled.
        completions: the samples (``group_size`` per prompt) at the round's cap.
        probe_completions: the same prompts sampled with ``probe`` tokens at most (``completions`` itself when
            ``probe == cap``: few were cut, no second sample).
        correct: per completion, whether it verified correct.
        reasons: per completion, the verdict reason (``ratchet.verifiers.verdict.REASONS``).
        cap: the round's completion cap, tokens; probe: the second sample's.
        algorithm: the round's (rft, grpo); auto: whether ``generation.max_new_tokens`` is 'auto'.
    """

    prompts: int
    completions: Sequence[Completion]
    probe_completions: Sequence[Completion]
    correct: Sequence[bool]
    reasons: Sequence[str]
    cap: int
    probe: int
    algorithm: str
    auto: bool = False

    def summary(self) -> str:
        """One line: what was sampled, how it scored (with the 95% Wilson interval of the pass rate) and the verdict
        reasons' counts."""
        n = len(self.completions)
        cut = sum(c.finish_reason == "length" for c in self.completions)
        k = sum(self.correct)
        lo, hi = wilson_interval(k, n) if n else (0.0, 1.0)
        return (
            f"pilot: {self.prompts} train prompt(s) x {n // max(self.prompts, 1)} samples of the base model: "
            f"{k}/{n} verified correct (the true rate could be {lo:.0%}-{hi:.0%}, 95%), {cut}/{n} cut at "
            f"max_new_tokens = {self.cap}; verdicts: {self.reason_counts()}"
        )

    def reason_counts(self) -> str:
        """``'wrong_answer 12, no_answer 4'``: the verdict reasons, most frequent first."""
        return ", ".join(f"{r} {c}" for r, c in Counter(self.reasons).most_common())

    def sample_text(self, width: int = 100) -> str:
        """One completion, whitespace collapsed and cut to ``width`` characters, quoted as text (``repr``): the first
        wrong one, else the first."""
        pick = next((c for c, ok in zip(self.completions, self.correct) if not ok), self.completions[0])
        text = " ".join(pick.text.split())
        return repr(text[:width] + ("…" if len(text) > width else ""))

    def warnings(self) -> list[str]:
        """One line per problem that would waste the round: completions cut at the cap (with a cap that fits), a pass
        rate of 0 (nothing to train on), no parseable answer at all."""
        n, out = len(self.completions), []
        if not n:
            return out
        cut = sum(c.finish_reason == "length" for c in self.completions)
        if cut / n >= TRUNCATED_SHARE:
            fit = fitting_cap(self.probe_completions) if self.probe > self.cap else None
            key = "generation.max_new_tokens_min" if self.auto else "generation.max_new_tokens"
            advice = f"set {key} = {fit}" if fit is not None else f"they run past {self.probe} tokens: raise {key} a lot"
            out.append(
                f"pilot: {cut}/{n} completions are cut at max_new_tokens = {self.cap} (truncated answers verify as wrong); "
                f"{advice} (and sft.max_seq_len to match)"
            )
        if not any(self.correct):
            trainer = "GRPO" if self.algorithm == "grpo" else "RFT"
            shown = 1 - (1 - FEW_RATE) ** n  # how often a true rate of FEW_RATE shows a correct sample in n
            out.append(
                f"pilot: 0/{n} verified correct on {self.prompts} train prompt(s): the true base rate could still be up "
                f"to ~{rate_upper_bound(0, n):.0%} (95% bound), but a rate of {FEW_RATE:.0%} or more would have shown a "
                f"correct sample {shown:.0%} of the time, so {trainer} will likely find few correct rollouts to train on "
                f"(verdicts: {self.reason_counts()}; e.g. {self.sample_text()}): raise group_size, add easier prompts, "
                "or use a teacher (generation.teacher)"
            )
        if all(r in UNPARSED for r in self.reasons):
            example = self.completions[0].text.strip()[:80]
            out.append(
                f"pilot: none of the {n} completions has a parseable answer (e.g. {example!r}); check the system prompt "
                "and few-shot examples ask for the answer in the form the verifier reads (docs/tasks.md)"
            )
        return out
