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

Generation prefix: chat templates of thinking models (R1-distill, Qwen3) pre-fill ``<think>`` in the
prompt, so the completion starts inside the reasoning block. ``check_format(..., prefix=...)`` checks
``prefix + completion``; ``generation_prefix(prompt)`` finds that prefix at the end of a prompt text.

Every check is linear in the completion's length: tags are found by a pattern whose whitespace runs
are bounded (``\\s{0,8}``) and the rules compare tag positions; no pattern spans the text between tags.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Literal

from ratchet.verifiers.math.extraction.extract import find_boxes
from ratchet.verifiers.verdict import Verdict

VERSION = "format-1.2.0"
Template = Literal["think_answer", "answer_line", "boxed", "none"]
TEMPLATES: tuple[str, ...] = ("think_answer", "answer_line", "boxed", "none")

_TAG = re.compile(r"<\s{0,8}/?\s{0,8}(?:think|answer)\s{0,8}/?\s{0,8}>")  # "< /answer>" and "<answer/>" are tags too
_WELL_FORMED_TAG = re.compile(r"</?(?:think|answer)\s{0,8}>")
_ANSWER_LABEL = re.compile(r"Answer\s{0,8}:")
_OPEN_REASONING = re.compile(r"<\s{0,8}(/?)\s{0,8}think\s{0,8}>")


def _think_answer(text: str) -> str | None:
    """Return None when ok, else a short description of the violation."""
    found = list(_TAG.finditer(text))
    tags = [m.group(0).replace(" ", "") for m in found]
    if tags != ["<think>", "</think>", "<answer>", "</answer>"]:
        return f"tags must be exactly <think></think><answer></answer> in order, got {tags[:8]}"
    if not all(_WELL_FORMED_TAG.fullmatch(m.group(0)) for m in found):
        return "malformed tag: write <think>, </think>, <answer>, </answer> without inner spaces"
    t_open, t_close, a_open, a_close = found
    outside = (text[: t_open.start()], text[t_close.end() : a_open.start()], text[a_close.end() :])
    if any(part.strip() for part in outside):
        return "text outside the <think> and <answer> blocks"
    if not text[a_open.end() : a_close.start()].strip():
        return "empty <answer> block"
    return None


def _answer_line(text: str) -> str | None:
    if _TAG.search(text):
        return "unexpected <think>/<answer> tags in an answer_line completion"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = _ANSWER_LABEL.match(lines[-1]) if lines else None
    if last is None or not lines[-1][last.end() :].strip():
        return "the last non-empty line must be 'Answer: <answer>'"
    if sum(bool(_ANSWER_LABEL.match(ln)) for ln in lines) != 1:
        return "more than one 'Answer:' line"
    return None


def _boxed(text: str) -> str | None:
    boxes = find_boxes(text)
    count = text.count(r"\boxed")
    if len(boxes) != 1 or count != 1:
        return f"expected exactly one \\boxed{{}}, found {count}"
    if boxes[0].content is None:
        return "unclosed \\boxed{"
    if not boxes[0].content.strip():
        return "empty \\boxed{}"
    return None


_RULES: dict[str, Callable[[str], str | None]] = {
    "think_answer": _think_answer,
    "answer_line": _answer_line,
    "boxed": _boxed,
    "none": lambda _t: None,
}


def generation_prefix(prompt: str) -> str:
    """The part of a prompt text that the completion continues: from an unclosed ``<think>`` at its end.

    A chat template that pre-fills ``<think>\\n`` ends the prompt inside a reasoning block; this
    returns ``"<think>\\n"`` for it, and ``""`` when the prompt's last ``<think>`` is closed or absent.
    """
    last = None
    for last in _OPEN_REASONING.finditer(prompt):  # noqa: B007 (only the last tag matters)
        pass
    if last is None or last.group(1):
        return ""
    return prompt[last.start() :]


def check_format(completion: str, template: str = "think_answer", *, prefix: str = "") -> Verdict:
    """Check a completion's structure against ``template``; linear time in its length.

    Args:
        completion: the model's output.
        template: one of ``TEMPLATES``.
        prefix: text the chat template put at the start of the assistant turn (e.g. ``"<think>\\n"``);
            the rule is checked on ``prefix + completion``.

    Returns:
        ``Verdict(verifier="format")``: ``correct``/``format_ok`` True and reward 1.0 when the
        structure is right, else reason ``format_error`` with the violation in ``details``.

    Raises:
        ValueError: unknown template (the message lists the valid ones).
    """
    if template not in _RULES:
        raise ValueError(f"format template {template!r} is unknown; use one of {TEMPLATES}")
    t0 = time.perf_counter()
    problem = _RULES[template](prefix + completion)
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
        details={
            "template": template,
            **({"prefix": prefix[:40]} if prefix else {}),
            **({"problem": problem} if problem else {}),
        },
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
