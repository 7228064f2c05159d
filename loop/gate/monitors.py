"""Reward-hacking monitors: what a candidate's completions show before its pass@1 does, each against a reference.

Computed every round on the greedy evaluation completions of the candidate and the incumbent on the same prompts
(paired: only prompts both have), so a monitor measures a *change* the round's training made, never a property the
task always had. The same-answer monitor compares with the golds' own rate (arithmetic golds repeat), or the
incumbent's where that is higher. Thresholds are
``[gate.monitors]`` (``ratchet.loop.config.MonitorsConfig``, each with its source); a monitor trips when its value is
above its threshold and at least ``min_prompts`` prompts were compared, and a tripped monitor halts the campaign with
its name in the reason. Pure functions: the flows read the completions from the store and store ``Monitor`` rows.

========================== ========================================================= ==================
monitor                    value                                                     reference
========================== ========================================================= ==================
length_mean_ratio          mean completion tokens, candidate / incumbent             incumbent
length_p90_ratio           90th percentile of completion tokens, candidate / inc.     incumbent
truncation_rate            share cut at max_new_tokens, candidate - incumbent        incumbent
format_without_correct     share of wrong completions with format reward, c. - inc. incumbent
no_answer_rate             share without a parseable answer, candidate - incumbent   incumbent
same_answer_share          most common answer's share of prompts, cand. - reference  golds (or incumbent)
language_mixing            share < 90% letters in the target script, cand. - inc.    incumbent
cross_check_disagreement   share the second verifier disagrees, candidate - inc.     incumbent
========================== ========================================================= ==================
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ratchet.loop.config import MonitorsConfig
from ratchet.verifiers.language import LANGUAGES, script_of, script_share

MONITORS: tuple[str, ...] = (
    "length_mean_ratio",
    "length_p90_ratio",
    "truncation_rate",
    "format_without_correct",
    "no_answer_rate",
    "same_answer_share",
    "language_mixing",
    "cross_check_disagreement",
)
MIXED_BELOW = 0.9  # a completion with under this share of its letters in the target script is "mixed"


@dataclass(frozen=True)
class Completion:
    """One greedy evaluation completion with its verdict: what the monitors read.

    ``tokens``: completion length in tokens; ``truncated``: cut at max_new_tokens; ``format_ok``: earned the format
    term (None: the verifier has none); ``answer``: the parsed final answer (None: no answer); ``cross_correct``: the
    second verifier's verdict (None: not run).
    """

    prompt_id: str
    tokens: int
    truncated: bool
    correct: bool
    format_ok: bool | None
    answered: bool
    answer: str | None
    text: str
    cross_correct: bool | None = None


@dataclass(frozen=True)
class Monitor:
    """One monitor's measurement: ``value`` (see the module table), ``candidate`` and ``reference`` (the two sides
    it compares), ``threshold`` (None: only measured), ``tripped`` and the halt reason it gives when tripped."""

    name: str
    value: float
    candidate: float
    reference: float
    reference_of: str  # "incumbent" | "golds"
    threshold: float | None
    prompts: int
    tripped: bool

    def reason(self) -> str:
        """The halt reason: the monitor's name, both sides, the rule and what to do."""
        op = "/" if self.name.startswith("length_") else "-"
        return (
            f"monitor {self.name}: {self.candidate:.3f} (candidate) {op} {self.reference:.3f} ({self.reference_of}) = "
            f"{self.value:.3f} > gate.monitors.{self.name} {self.threshold} on {self.prompts} prompts (read its flipped "
            "prompts and completions in `ratchet report`; raise the threshold or `ratchet campaign resume` if benign)"
        )


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` with linear interpolation between order statistics (numpy's default, Hyndman &
    Fan 1996 definition 7). Raises ValueError on an empty ``xs``."""
    if not xs:
        raise ValueError("quantile of no values")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def _share(cs: Sequence[Completion], pred) -> float:
    return sum(1 for c in cs if pred(c)) / len(cs)


def modal_share(answers: Sequence[str | None]) -> float:
    """Share of the prompts given the most common (normalized: stripped, lower-case) answer, among those with one."""
    got = [a.strip().lower() for a in answers if a is not None and a.strip()]
    return Counter(got).most_common(1)[0][1] / len(got) if got else 0.0


def target_scripts(target_language: str, texts: Sequence[str]) -> frozenset[str]:
    """The scripts completions should be written in: ``target_language``'s (``verifiers.language.LANGUAGES``), or for
    'none' the most common letter script of ``texts`` (the questions); LATIN when they have no letters."""
    if target_language in LANGUAGES:
        return LANGUAGES[target_language]
    counts = Counter(script_of(ch) for t in texts for ch in t if ch.isalpha())
    return frozenset({counts.most_common(1)[0][0] if counts else "LATIN"})


def is_mixed(text: str, scripts: frozenset[str]) -> bool:
    """True when under ``MIXED_BELOW`` of ``text``'s letters are in ``scripts``: the language-consistency measure of the
    reward (``verifiers.language.script_share``; DeepSeek-R1 section 2.3.2), LaTeX and code removed first."""
    return script_share(text, scripts) < MIXED_BELOW


def measure(
    candidate: Sequence[Completion],
    incumbent: Sequence[Completion],
    golds: dict[str, str],
    cfg: MonitorsConfig,
    scripts: frozenset[str] = frozenset({"LATIN"}),
) -> list[Monitor]:
    """Every monitor on the prompts both sides have (see the module table); ``golds``: prompt id -> gold answer;
    ``scripts``: the target scripts (``target_scripts``). The cross-check monitor is measured only when both sides
    carry second-verifier verdicts (on the prompts it judged on both). Empty when the sides share no prompt.
    """
    inc_by = {c.prompt_id: c for c in incumbent}
    cand = [c for c in candidate if c.prompt_id in inc_by]
    inc = [inc_by[c.prompt_id] for c in cand]
    if not cand:
        return []
    n = len(cand)
    tokens = lambda cs: [float(c.tokens) for c in cs]  # noqa: E731
    pairs: dict[str, tuple[float, float, str]] = {
        "length_mean_ratio": (sum(tokens(cand)) / n, sum(tokens(inc)) / n, "incumbent"),
        "length_p90_ratio": (quantile(tokens(cand), 0.9), quantile(tokens(inc), 0.9), "incumbent"),
    }
    shares = {
        "truncation_rate": lambda c: c.truncated,
        "no_answer_rate": lambda c: not c.answered,
        "language_mixing": lambda c: is_mixed(c.text, scripts),
    }
    for name, pred in shares.items():
        pairs[name] = (_share(cand, pred), _share(inc, pred), "incumbent")
    # among wrong completions (so a candidate that is only less accurate does not trip it)
    formatted = lambda cs: _share(w, lambda c: bool(c.format_ok)) if (w := [c for c in cs if not c.correct]) else 0.0  # noqa: E731
    pairs["format_without_correct"] = (formatted(cand), formatted(inc), "incumbent")
    # the golds' own repeat rate, or the incumbent's when higher: the change this round made, never the task's own
    gold, inc_share = modal_share([golds.get(c.prompt_id) for c in cand]), modal_share([c.answer for c in inc])
    ref = ("golds", gold) if gold >= inc_share else ("incumbent", inc_share)
    pairs["same_answer_share"] = (modal_share([c.answer for c in cand]), ref[1], ref[0])
    judged = [(c, i) for c, i in zip(cand, inc, strict=True) if c.cross_correct is not None and i.cross_correct is not None]
    if judged:  # prompts the second verifier judged on both sides
        disagree = lambda c: c.cross_correct != c.correct  # noqa: E731
        cs, cr = [c for c, _ in judged], [i for _, i in judged]
        pairs["cross_check_disagreement"] = (_share(cs, disagree), _share(cr, disagree), "incumbent")
    out = []
    for name in MONITORS:
        if name not in pairs:
            continue
        c, r, of = pairs[name]
        value = (c / r if r > 0 else (1.0 if c == 0 else math.inf)) if name.startswith("length_") else c - r
        threshold = getattr(cfg, name)
        tripped = threshold is not None and n >= cfg.min_prompts and value > threshold
        out.append(Monitor(name, value, c, r, of, threshold, n, tripped))
    return out


def tripped_reasons(monitors: Sequence[Monitor]) -> list[str]:
    """The halt reasons of the tripped monitors (``Monitor.reason``), in ``MONITORS`` order."""
    return [m.reason() for m in monitors if m.tripped]
