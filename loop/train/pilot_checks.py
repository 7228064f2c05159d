"""The pilot's findings: what a few base-model samples say will waste a campaign's first round.

Before a campaign's first round, ``ratchet run`` samples a few train prompts with the model that will generate
(``ratchet.flows.rounds.pilot``), at the round's sampling settings and cap; when many are cut it samples them again
with a longer cap (``probe_cap``) to see which cap would fit. This module turns those samples and their verdicts
into one line per problem; it generates nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.loop.generation.sampling import Completion
from ratchet.loop.train.lengths import AUTO_FACTOR

PROBE_FACTOR = 4  # cut completions are sampled again with up to 4 x the round's cap, to see how long they wanted to be
PROBE_MAX_TOKENS = 512  # ... bounded: that second sample runs to its cap while any sequence rambles
TRUNCATED_SHARE = 0.25  # warn when at least this share of the pilot's completions would be cut at the round's cap
UNPARSED = ("no_answer", "parse_error", "ambiguous")  # verdict reasons that mean no answer could be read


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
        """One line: what was sampled and how it scored."""
        n = len(self.completions)
        cut = sum(c.finish_reason == "length" for c in self.completions)
        return (
            f"pilot: {self.prompts} train prompt(s) x {n // max(self.prompts, 1)} samples of the base model: "
            f"{sum(self.correct)}/{n} verified correct, {cut}/{n} cut at max_new_tokens = {self.cap}"
        )

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
            out.append(
                f"pilot: base pass rate 0/{n} on {self.prompts} train prompt(s): {trainer} will have nothing to train on: "
                "raise group_size, add easier prompts, or use a teacher (generation.teacher)"
            )
        if all(r in UNPARSED for r in self.reasons):
            example = self.completions[0].text.strip()[:80]
            out.append(
                f"pilot: none of the {n} completions has a parseable answer (e.g. {example!r}); check the system prompt "
                "and few-shot examples ask for the answer in the form the verifier reads (docs/tasks.md)"
            )
        return out
