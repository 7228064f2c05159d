"""Composite reward: a small format bonus, the verified outcome and a language-consistency term; a TRL adapter.

    reward = format_weight * format_ok + 1.0 * correct + language_weight * language_share
                                                              when the answer parses,
    reward = 0                                                when it does not.

``language_share`` (``verifiers.language``) is the share of the completion's letters in
``target_language``'s script: DeepSeek-R1's language-consistency reward (section 2.3.2), added to the
accuracy reward as there. The term is 0 with ``target_language="none"`` or ``language_weight=0``.
The weights are campaign settings (stored with the campaign's config), not part of ``VERSION``.

"Parses" means the outcome verifier found and read an answer: reasons ``no_answer``,
``parse_error`` and ``ambiguous`` (math), ``no_answer`` (code) give 0 even with a perfect format,
so the policy cannot farm the format bonus without answering. With ``format_template="none"`` the
format term is 0 (nothing was checked) and ``format_ok`` is True. One grading function serves
both reward and evaluation (``correct`` is exactly the outcome verifier's verdict).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from ratchet.verifiers import code as code_v
from ratchet.verifiers import format as format_v
from ratchet.verifiers import language as language_v
from ratchet.verifiers import lean as lean_v
from ratchet.verifiers import math as math_v
from ratchet.verifiers.math.extraction.extract import read_span
from ratchet.verifiers.verdict import Verdict

VERSION = f"composite-1.0.0[{math_v.VERSION},{code_v.VERSION},{format_v.VERSION}]"
# Every verifier's own version, as a round's manifest records them.
VERSIONS = {"composite": VERSION, "math": math_v.VERSION, "code": code_v.VERSION, "format": format_v.VERSION}
_UNPARSED = ("no_answer", "parse_error", "ambiguous")
_KEPT_DETAILS = ("answer_format", "error", "passed", "total", "violation", "lean_status", "problem")
Kind = Literal["math", "code", "lean"]


def _compose(
    outcome: Verdict,
    fmt: Verdict,
    template: str,
    format_weight: float,
    t0: float,
    lang: float | None,
    lw: float,
    read_chars: int | None = None,
) -> Verdict:
    parsed_ok = outcome.reason not in _UNPARSED
    bonus = format_weight if (fmt.format_ok and template != "none") else 0.0
    lang_term = lw * lang if lang is not None else 0.0
    reward = (bonus + (1.0 if outcome.correct else 0.0) + lang_term) if parsed_ok else 0.0
    details = {
        "outcome_reason": outcome.reason,
        "outcome_verifier": outcome.verifier,
        "outcome_version": outcome.verifier_version,
        "format_template": template,
        **({"format_problem": fmt.details["problem"]} if "problem" in fmt.details else {}),
        **({"language_share": round(lang, 4)} if lang is not None else {}),
        **{k: v for k, v in outcome.details.items() if k in _KEPT_DETAILS},
    }
    return Verdict(
        correct=outcome.correct,
        reward=reward,
        reason=outcome.reason,
        parsed=outcome.parsed,
        verifier="composite",
        verifier_version=VERSION,
        latency_s=time.perf_counter() - t0,
        format_ok=fmt.format_ok,
        details=details,
        read_chars=read_chars,
    )


def _check(format_weight: float, kind: str, template: str, language_weight: float = 0.0, target_language: str = "none") -> None:
    if not 0.0 <= format_weight <= 1.0:
        raise ValueError(f"format_weight ({format_weight}) must be in [0, 1]; the outcome is worth 1.0, use e.g. 0.1")
    if not 0.0 <= language_weight <= 1.0:
        raise ValueError(f"language_weight ({language_weight}) must be in [0, 1]; the outcome is worth 1.0, use e.g. 0.1")
    if target_language != "none":
        language_v.check_language(target_language)
    elif language_weight > 0:
        raise ValueError(f"language_weight ({language_weight}) > 0 needs a target_language; set e.g. target_language='en'")
    if kind not in ("math", "code", "lean"):
        raise ValueError(f"kind {kind!r} is unknown; use 'math', 'code' or 'lean'")
    if template not in format_v.TEMPLATES:
        raise ValueError(f"format_template {template!r} is unknown; use one of {format_v.TEMPLATES}")


@dataclass(frozen=True)
class RewardSpec:
    """Every setting that decides a completion's composite reward: built once (a campaign's ``[verifier]``,
    ``ratchet.loop.evaluation.scoring.reward_spec``) and passed to every scorer, so the verify stage,
    evaluation, ``ratchet reverify`` and ``ratchet tasks check`` cannot score with different settings.

    Attributes:
        format_template: ``verifiers.format`` template of the format term; ``"none"``: no format term.
        format_weight: weight of the format term in [0, 1]; the outcome is worth 1.0.
        timeout_s: hard per-item limit of the outcome verifier (math: the sympy stage), seconds.
        code_timeout_s: the code sandbox's wall-time budget per verification, seconds (None: ``max(timeout_s, 5)``).
        format_prefix: text the chat template pre-fills in the assistant turn (``"<think>\\n"``), read before the completion.
        language_weight: weight in [0, 1] of the language-consistency share (0 = off).
        target_language: ``verifiers.language.LANGUAGES`` code or ``"none"``.
        lean_url: the Lean server for ``kind="lean"`` (None: ``verifiers.lean.server_url``).
        code_isolation: the code sandbox's mode, ``"kernel"`` or ``"weak"`` (None: ``RATCHET_CODE_ISOLATION`` or kernel).
        answer_format: the math verifier's final-answer marker (``verifiers.math.ANSWER_FORMATS``; ``"auto"``: every
            marker in the policy's precedence).
        source_formats: ``(task source name, answer format)`` pairs: a source's own marker (``format_for``).
        source_verifiers: ``(task source name, verifier reference, plugin folder or None, sandbox)`` per source with its
            own verifier (``records`` format; run by ``ratchet.verifiers.plugins``, ``code_budget_s`` per call).
        source_environments: ``(task source name, environment reference, plugin folder or None)`` per source with a
            multi-turn environment; one with ``score(messages, record)`` judges its episodes
            (``ratchet.loop.evaluation.episode_scoring``).

    Raises:
        ValueError: (at construction) a weight out of range, an unknown template, language or answer format.
    """

    format_template: str = "none"
    format_weight: float = 0.1
    timeout_s: float = 2.0
    code_timeout_s: float | None = None
    format_prefix: str = ""
    language_weight: float = 0.0
    target_language: str = "none"
    lean_url: str | None = None
    code_isolation: str | None = None
    answer_format: str = "auto"
    source_formats: tuple[tuple[str, str], ...] = ()
    source_verifiers: tuple[tuple[str, str, str | None, bool], ...] = ()
    source_environments: tuple[tuple[str, str, str | None], ...] = ()

    def __post_init__(self) -> None:
        _check(self.format_weight, "math", self.format_template, self.language_weight, self.target_language)
        for fmt in (self.answer_format, *(f for _, f in self.source_formats)):
            if fmt not in math_v.ANSWER_FORMATS:
                raise ValueError(f"answer_format {fmt!r} is unknown; use one of {', '.join(math_v.ANSWER_FORMATS)}")

    def format_for(self, source: str | None) -> str:
        """The answer format of a prompt of task source ``source``: its own (``source_formats``), else ``answer_format``."""
        return dict(self.source_formats).get(str(source), self.answer_format)

    @property
    def code_budget_s(self) -> float:
        """The code sandbox's time budget per verification, seconds."""
        return self.code_timeout_s or max(self.timeout_s, 5.0)

    def with_settings(self, **settings: Any) -> RewardSpec:
        """This spec with some settings replaced (keyword names as the attributes).

        Raises:
            ValueError: an unknown setting (the message lists the valid ones), or a value the spec refuses.
        """
        names = {f.name for f in fields(self)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise ValueError(f"unknown reward setting(s) {unknown}; valid: {', '.join(sorted(names))}")
        return replace(self, **settings) if settings else self

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> RewardSpec:
        """A spec from a mapping of its settings (unknown keys, e.g. other ``[verifier]`` fields, are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in names})


DEFAULT_REWARD = RewardSpec()  # the reward's defaults: ``as_trl_reward`` and ``[verifier]`` take theirs from it


def score(
    completion: str,
    gold: str,
    *,
    kind: Kind = "math",
    tests: Sequence[Any] | None = None,
    spec: RewardSpec | None = None,
    **settings: Any,
) -> Verdict:
    """Composite reward of one completion (see module docstring).

    Args:
        completion: model output.
        gold: gold answer (math), reference solution (code) or formal statement (lean).
        kind: outcome verifier.
        tests: code tests (required for ``kind="code"``).
        spec: the reward's settings (default ``RewardSpec()``); ``settings`` (``RewardSpec`` attribute names,
            e.g. ``format_template="answer_line"``) replace single settings of it.

    Returns:
        ``Verdict(verifier="composite")`` with ``reward`` in [0, 1 + format_weight + language_weight].

    Raises:
        ValueError: bad kind, an unknown setting, or a value the spec refuses (the message says which).
        LeanServerError: ``kind="lean"`` and the Lean server cannot be reached.
    """
    return score_batch([completion], [gold], kind=kind, tests=[tests] if tests is not None else None, spec=spec, **settings)[0]


def score_batch(
    completions: Sequence[str],
    golds: Sequence[str],
    *,
    kind: Kind = "math",
    tests: Sequence[Sequence[Any] | None] | None = None,
    spec: RewardSpec | None = None,
    format_prefix: str | Sequence[str] | None = None,
    answer_format: str | Sequence[str] | None = None,
    **settings: Any,
) -> list[Verdict]:
    """``score`` over parallel lists (math via ``verify_math_batch``, code via ``verify_code_batch``).

    ``spec`` (default ``RewardSpec()``) holds the settings, ``settings`` replace single ones of it;
    ``format_prefix`` is one prefix for all completions or one per completion (default: the spec's);
    ``answer_format`` (math) likewise, one for all or one per completion (default: ``spec.answer_format``).

    Raises:
        ValueError: lengths differ, or bad kind, setting or value (the message says which).
        LeanServerError: ``kind="lean"`` and the Lean server cannot be reached.
    """
    spec = (spec or DEFAULT_REWARD).with_settings(**settings)
    format_prefix = spec.format_prefix if format_prefix is None else format_prefix
    prefixes = [format_prefix] * len(completions) if isinstance(format_prefix, str) else list(format_prefix)
    if len(prefixes) != len(completions):
        raise ValueError(
            f"{len(prefixes)} format prefixes but {len(completions)} completions; pass one prefix or one per completion"
        )
    _check(spec.format_weight, kind, spec.format_template, spec.language_weight, spec.target_language)
    if len(completions) != len(golds):
        raise ValueError(f"{len(completions)} completions but {len(golds)} golds; pass one gold per completion")
    t0 = time.perf_counter()
    if kind == "math":
        formats = spec.answer_format if answer_format is None else answer_format
        outcomes = math_v.verify_math_batch(list(zip(golds, completions)), timeout_s=spec.timeout_s, answer_format=formats)
    elif kind == "lean":
        outcomes = lean_v.verify_lean_batch(list(zip(golds, completions)), url=spec.lean_url, timeout_s=spec.timeout_s)
    else:
        if tests is None or len(tests) != len(completions):
            raise ValueError("kind='code' needs tests: one list of tests per completion")
        outcomes = code_v.verify_code_batch(
            [(g, c, t or []) for g, c, t in zip(golds, completions, tests)],
            timeout_s=spec.timeout_s,
            isolation=spec.code_isolation,
        )
    fmts = [format_v.check_format(c, spec.format_template, prefix=p) for c, p in zip(completions, prefixes)]
    target = spec.target_language
    langs = [language_v.language_share(c, target) if target != "none" else None for c in completions]
    spans = [read_span(c) for c in completions] if kind == "math" else [None] * len(completions)
    return [
        _compose(o, f, spec.format_template, spec.format_weight, t0, lang, spec.language_weight, span)
        for o, f, lang, span in zip(outcomes, fmts, langs, spans)
    ]


def completion_text(completion: Any) -> str:
    """Text of a TRL completion: a string, or a list of chat messages (last assistant message)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in msgs if m.get("role", "assistant") == "assistant"]
        chosen = assistant[-1] if assistant else (msgs[-1] if msgs else None)
        return str(chosen.get("content", "")) if chosen else ""
    raise TypeError(f"completion of type {type(completion).__name__} is not a string or a list of chat messages")


def _prefixes(fixed: str | None, prompts: Sequence[Any] | None, n: int) -> list[str]:
    """One generation prefix per completion: ``fixed``, else detected from text prompts, else ""."""
    if fixed is not None:
        return [fixed] * n
    if prompts is None or len(prompts) != n:
        return [""] * n
    return [format_v.generation_prefix(p) if isinstance(p, str) else "" for p in prompts]


def as_trl_reward(
    verifier: Literal["math", "code", "format", "composite"] = "composite",
    *,
    answer_column: str = "answer",
    tests_column: str = "tests",
    kind: Kind = "math",
    format_template: str = DEFAULT_REWARD.format_template,
    format_weight: float = DEFAULT_REWARD.format_weight,
    timeout_s: float = DEFAULT_REWARD.timeout_s,
    format_prefix: str | None = None,
    language_weight: float = DEFAULT_REWARD.language_weight,
    target_language: str = DEFAULT_REWARD.target_language,
) -> Callable[..., list[float]]:
    """Expose a Ratchet verifier as a TRL reward function ``f(prompts, completions, **columns) -> list[float]``.

    ``completions`` may be strings or lists of chat messages; the gold comes from the dataset
    column ``answer_column`` (and code tests from ``tests_column``), which TRL passes as keyword
    arguments. The function's ``__name__`` is ``ratchet_<verifier>`` (TRL logs rewards by name).

    ``format_prefix``: what the chat template pre-fills in the assistant turn (``"<think>\\n"``), seen
    by the format rule before each completion. None: taken from each prompt given as text (its tail
    from an unclosed ``<think>``, ``verifiers.format.generation_prefix``); "" for chat-message prompts.
    """
    _check(format_weight, kind, format_template if verifier != "format" else "none", language_weight, target_language)
    spec = RewardSpec(
        format_template=format_template,
        format_weight=format_weight,
        timeout_s=timeout_s,
        language_weight=language_weight,
        target_language=target_language,
    )

    def reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **columns: Any) -> list[float]:
        texts = [completion_text(c) for c in completions]
        prefixes = _prefixes(format_prefix, prompts, len(texts))
        if verifier == "format":
            return [format_v.check_format(t, format_template, prefix=p).reward for t, p in zip(texts, prefixes)]
        if answer_column not in columns:
            raise KeyError(
                f"reward needs the dataset column {answer_column!r} (got columns {sorted(columns)}); set answer_column="
            )
        golds = [str(g) for g in columns[answer_column]]
        tests = columns.get(tests_column)
        if verifier == "math":
            return [v.reward for v in math_v.verify_math_batch(list(zip(golds, texts)), timeout_s=timeout_s)]
        if verifier == "code":
            items = [(g, t, ts or []) for g, t, ts in zip(golds, texts, tests or [None] * len(texts))]
            return [v.reward for v in code_v.verify_code_batch(items, timeout_s=timeout_s)]
        return [v.reward for v in score_batch(texts, golds, kind=kind, tests=tests, spec=spec, format_prefix=prefixes)]

    reward.__name__ = f"ratchet_{verifier}"
    return reward
