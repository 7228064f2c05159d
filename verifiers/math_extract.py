"""Stage 1a of math verification: find the final answer in a completion (``extract_answer``).

Pure string work (regular expressions and exact ``fractions.Fraction`` arithmetic): nothing here
imports sympy, so extraction and the cheap parse of numbers, choices, sets, intervals and text run
in the caller's process in microseconds. Anything that needs a computer-algebra system stays a
``kind="expression"`` leaf holding normalized LaTeX; ``ratchet.verifiers.math_sympy`` handles those in a
killable worker process.

Extraction rules (``extract_answer``):
    * text inside ``<think>...</think>`` is never graded; an unclosed ``<think>`` hides the rest,
      a stray ``</think>`` hides everything before it;
    * if there is an ``<answer>...</answer>`` block, only its content is graded (a ``\\boxed{}``
      inside it wins over the surrounding words);
    * otherwise every ``\\boxed{}``/``\\fbox{}``; otherwise ``Answer: X`` lines; otherwise the last
      ``the answer is X`` statement;
    * several *different* final answers, or hedge words ("one of", "either", "maybe", ...), give
      ``ambiguous``; there is no "last number anywhere" fallback unless asked for
      (``fallback_last_number=True``), because it rewards hedging.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ratchet.verifiers.math_normalize import ParseError
from ratchet.verifiers.math_parse import parse_answer


@dataclass(frozen=True)
class Extraction:
    """Where the final answer was found.

    Attributes:
        text: the extracted answer text, or None.
        status: ``"ok"``, ``"no_answer"`` or ``"ambiguous"``.
        source: ``"answer_tag"``, ``"boxed"``, ``"answer_line"``, ``"answer_phrase"``, ``"last_number"`` or ``""``.
        candidates: every distinct candidate seen (several -> ambiguous).
    """

    text: str | None
    status: Literal["ok", "no_answer", "ambiguous"]
    source: str = ""
    candidates: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------
# extraction

_REASONING_TAGS = r"(?:think|thinking|thought|thoughts|reasoning|reflection|scratchpad)"
_THINK_BLOCK = re.compile(rf"<\s*({_REASONING_TAGS})\s*>.*?<\s*/\s*\1\s*>", re.S | re.I)
_THINK_OPEN = re.compile(rf"<\s*{_REASONING_TAGS}\s*>", re.I)
_THINK_CLOSE = re.compile(rf"<\s*/\s*{_REASONING_TAGS}\s*>", re.I)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_LINE = re.compile(r"(?im)^[\s*#>_-]*(?:\**\s*)?(?:final\s+answer|answer)\s*\**\s*[:：]\s*\**\s*(.+?)\s*$")
_ANSWER_PHRASE = re.compile(
    r"(?i)(?:the\s+)?(?:final\s+)?answer\s+(?:is|would\s+be|will\s+be|=)\s*[:：]?\s*(.+?)\s*(?:$|\n|(?<!\d)\.(?!\d)|\.\s)"
    r"|(?:答案|结果)\s*(?:是|为|：|:)\s*(.+?)\s*(?:$|\n|。)"
)
_HEDGE = re.compile(
    r"(?i)\b(?:one\s+of|either|maybe|perhaps|possibly|probably|might\s+be|could\s+be|not\s+sure|or\s+maybe|i\s+think|guess)\b|\?\s*$"
)
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _strip_think(text: str) -> str:
    text = _THINK_BLOCK.sub(" ", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # a stray closing tag hides everything before it
        text = text[closes[-1].end() :]
    opening = _THINK_OPEN.search(text)
    if opening:  # an unclosed opening tag hides the rest
        text = text[: opening.start()]
    return text


def find_boxed(text: str) -> list[str]:
    """Return the contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), in order."""
    out: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)(?![A-Za-z])\s*(\{|\s|(?=[0-9+-]))", text):
        if m.group(1) != "{":  # "\boxed 5": one token
            tok = re.match(r"\s*([^\s$]+)", text[m.end() :])
            if tok:
                out.append(tok.group(1))
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1].strip())
    return out


def _clean_candidate(s: str) -> str:
    s = s.strip().strip("*").strip()
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s).strip()
    return s.rstrip(".。,;").strip()


def _distinct(cands: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for c in cands:
        key = re.sub(r"\s+|\$", "", c)
        try:
            key = parse_answer(c).canonical()
        except ParseError:
            pass
        seen.setdefault(key, c)
    return list(seen.values())


def _outermost_free(boxes: list[str]) -> list[str]:
    """Drop box contents that themselves hold a box (``\\boxed{\\boxed{3}}``): the inner box is listed too."""
    return [b for b in boxes if not re.search(r"\\(?:boxed|fbox)(?![A-Za-z])", b)]


def _parses(text: str) -> bool:
    """Whether ``text`` reads as a mathematical answer (prose such as "see above" does not count)."""
    try:
        return parse_answer(_clean_candidate(text)).kind != "text"
    except ParseError:
        return False


def _decide(cands: list[str], source: str, rivals: list[str] | None = None) -> Extraction:
    """One final answer from ``cands``; ``rivals`` (answers stated elsewhere) can only make it ambiguous."""
    cands = [_clean_candidate(c) for c in cands]
    cands = [c for c in cands if c]
    if not cands:
        return Extraction(None, "no_answer", source)
    rival = [c for c in (_clean_candidate(r) for r in rivals or []) if c]
    distinct = _distinct(cands + rival)
    if len(distinct) > 1:
        return Extraction(None, "ambiguous", source, tuple(distinct))
    text = distinct[0]
    if _HEDGE.search(text):
        return Extraction(None, "ambiguous", source, (text,))
    return Extraction(text, "ok", source, (text,))


def extract_answer(completion: str, *, fallback_last_number: bool = False) -> Extraction:
    """Find the final answer of a completion (see the module docstring for the rules).

    Args:
        completion: the model's full output text.
        fallback_last_number: opt-in: when no marked answer exists, use the last number in the
            text. Off by default because it rewards hedging and rambling.

    Returns:
        An ``Extraction``; ``text`` is None unless ``status == "ok"``.
    """
    visible = _strip_think(completion)
    tags = _ANSWER_TAG.findall(visible)
    if not tags and re.search(r"<answer>", visible, re.I):
        tags = [re.split(r"(?i)<answer>", visible)[-1]]
    if tags:
        if len(_distinct([_clean_candidate(t) for t in tags if t.strip()])) > 1:
            return Extraction(None, "ambiguous", "answer_tag", tuple(tags))
        inner = tags[-1]
        outside = _outermost_free(find_boxed(_ANSWER_TAG.sub(" ", visible)))  # a second, different final answer
        boxed = _outermost_free(find_boxed(inner))
        if boxed:
            return _decide(boxed, "answer_tag", outside)
        lines = _ANSWER_LINE.findall(inner)
        phrases = [a or b for a, b in _ANSWER_PHRASE.findall(inner)]
        if lines or phrases:
            return _decide(lines or phrases[-1:], "answer_tag", outside)
        return _decide([inner], "answer_tag", outside)
    boxed = _outermost_free(find_boxed(visible))
    if boxed:
        # an "Answer: X" line that disagrees with the box is a second final answer (a hedge)
        lines = [ln for ln in _ANSWER_LINE.findall(visible) if not re.search(r"\\(?:boxed|fbox)", ln)]
        return _decide(boxed, "boxed", [ln for ln in lines if _parses(ln)])
    lines = _ANSWER_LINE.findall(visible)
    if lines:
        return _decide(lines, "answer_line")
    phrases = [a or b for a, b in _ANSWER_PHRASE.findall(visible)]
    if phrases:
        return _decide(phrases[-1:], "answer_phrase")
    if fallback_last_number:
        nums = _LAST_NUMBER.findall(visible)
        if nums:
            return Extraction(nums[-1], "ok", "last_number", (nums[-1],))
    return Extraction(None, "no_answer", "")
