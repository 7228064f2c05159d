"""Format (structure) checks for completions: exact rules, no lazy regexes spanning repeated blocks.

Templates:
    * ``"think_answer"``: exactly one ``<think>...</think>`` block, then exactly one
      ``<answer>...</answer>`` block with non-empty content; only whitespace before ``<think>``,
      between the blocks and after ``</answer>``; no nested or stray tags.
    * ``"answer_line"``: the last non-empty line is ``Answer: <something>`` and it is the only
      ``Answer:`` line; no ``<think>``/``<answer>`` tags.
    * ``"boxed"``: exactly one ``\\boxed{...}`` with balanced braces and non-empty content.
    * ``"none"``: no rule (always ok).

Tags are matched case-sensitively, because chat templates emit them exactly.
"""

from __future__ import annotations

import re
import time
from typing import Literal

from ratchet.verifiers.verdict import Verdict

VERSION = "format-1.1.0"
Template = Literal["think_answer", "answer_line", "boxed", "none"]
TEMPLATES: tuple[str, ...] = ("think_answer", "answer_line", "boxed", "none")

_TAG = re.compile(r"<\s*/?\s*(?:think|answer)\s*/?\s*>")  # "< /answer>" and "<answer/>" are tags too
_ANSWER_LINE = re.compile(r"^\s*Answer\s*:\s*(\S.*?)\s*$")


def _think_answer(text: str) -> str | None:
    """Return None when ok, else a short description of the violation."""
    tags = [m.group(0).replace(" ", "") for m in _TAG.finditer(text)]
    if tags != ["<think>", "</think>", "<answer>", "</answer>"]:
        return f"tags must be exactly <think></think><answer></answer> in order, got {tags[:8]}"
    m = re.fullmatch(r"\s*<think\s*>(.*)</think\s*>\s*<answer\s*>(.*)</answer\s*>\s*", text, re.S)
    if m is None:
        return "text outside the <think> and <answer> blocks"
    if not m.group(2).strip():
        return "empty <answer> block"
    return None


def _answer_line(text: str) -> str | None:
    if _TAG.search(text):
        return "unexpected <think>/<answer> tags in an answer_line completion"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not _ANSWER_LINE.match(lines[-1]):
        return "the last non-empty line must be 'Answer: <answer>'"
    if sum(bool(re.match(r"^\s*Answer\s*:", ln)) for ln in lines) != 1:
        return "more than one 'Answer:' line"
    return None


def _boxed(text: str) -> str | None:
    from ratchet.verifiers.math_extract import find_boxed

    boxes = find_boxed(text)
    if len(boxes) != 1 or text.count(r"\boxed") != 1:
        return f"expected exactly one \\boxed{{}}, found {text.count(chr(92) + 'boxed')}"
    if not boxes[0].strip():
        return "empty \\boxed{}"
    return None


_RULES = {"think_answer": _think_answer, "answer_line": _answer_line, "boxed": _boxed, "none": lambda _t: None}


def check_format(completion: str, template: str = "think_answer") -> Verdict:
    """Check a completion's structure against ``template``.

    Returns:
        ``Verdict(verifier="format")``: ``correct``/``format_ok`` True and reward 1.0 when the
        structure is right, else reason ``format_error`` with the violation in ``details``.

    Raises:
        ValueError: unknown template (the message lists the valid ones).
    """
    if template not in _RULES:
        raise ValueError(f"format template {template!r} is unknown; use one of {TEMPLATES}")
    t0 = time.perf_counter()
    problem = _RULES[template](completion)
    ok = problem is None
    return Verdict(
        correct=ok,
        reward=1.0 if ok else 0.0,
        reason="ok" if ok else "format_error",
        parsed=None,
        verifier="format",
        verifier_version=VERSION,
        latency_s=time.perf_counter() - t0,
        format_ok=ok,
        details={"template": template, **({"problem": problem} if problem else {})},
    )


def template_for_rule(description: str) -> str:
    """Pick the template that a human rule description names (used by the audit).

    Mentions of ``Answer:`` -> ``answer_line``; of ``\\boxed`` -> ``boxed``; of ``none``/``no format``
    -> ``none``; anything else (including ``<think>``/``<answer>``) -> ``think_answer``, the default.
    """
    d = description.lower()
    if re.search(r"answer\s*:", d) and "<answer>" not in d:
        return "answer_line"
    if "boxed" in d and "<answer>" not in d:
        return "boxed"
    if re.fullmatch(r"\s*(none|no format.*)\s*", d):
        return "none"
    return "think_answer"
