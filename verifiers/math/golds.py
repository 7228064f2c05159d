"""Golds as datasets store them: the answer a gold states (``gold_answer_text``) and its cached parse.

A worked solution (MATH) is graded by its last ``\\boxed{}`` (boxes joined to it by "and", ",", ";" or "or" are
a multi-answer gold); a gold in prose that does not parse is read like a completion (its extracted final answer).
A multiple-choice task's gold carries its options: the JSON object ``{"answer": "C", "choices": ["30", ...]}``
(``choice_gold``; ``split_gold`` reads it), so they travel with the gold wherever the gold goes.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence

from ratchet.verifiers.math.extraction.extract import extract_answer, find_boxes
from ratchet.verifiers.math.parsing.parse import Answer, ParseError, parse_answer

_JOINED = re.compile(r"\band\b|\bor\b|[,;&]|\\q?quad|和|或", re.I)


def gold_answer_text(gold: str) -> str:
    """The answer a gold states (see the policy docstring, "Golds").

    A worked solution (MATH) gives its last non-empty ``\\boxed{}``; boxes joined to it by a
    conjunction (``\\boxed{1} and \\boxed{-2}``, ``\\boxed{1}, \\boxed{2}``) are one multi-answer gold,
    a list of them all (boxes separated by other prose are not); a gold in prose that does not
    parse (a stored model solution ending ``Final Answer: The final answer is $28\\%$``) gives its
    extracted final answer; anything else is the gold itself.
    """
    if "boxed" in gold or "fbox" in gold:
        boxes = [b for b in find_boxes(gold) if b.content]
        if not boxes:
            return gold
        listed = [boxes[-1].content]  # the last box, and the boxes joined to it by "and" / "," / "or"
        for prev, nxt in zip(boxes[-2::-1], boxes[:0:-1]):
            between = gold[prev.end : nxt.start]
            if len(between) > 40 or (between.strip(" $\\()[]") and not _JOINED.search(between)):
                break
            listed.insert(0, prev.content)
        return "; ".join(dict.fromkeys(listed))  # type: ignore[arg-type]
    if len(gold) > 80 or "\n" in gold:
        try:
            parse_answer(gold)
        except ParseError:
            ex = extract_answer(gold, check_tail=False)  # a gold's "Note: ... incorrect" is the dataset's text, not a retraction
            if ex.status == "ok" and ex.text:
                return ex.text
    return gold


@functools.lru_cache(maxsize=4096)
def parsed_gold(gold: str) -> tuple[str, Answer | None, str | None]:
    """``(answer text, parsed Answer or None, parse error or None)`` of a gold; cached, since a round
    compares each gold with G completions (``Answer`` is frozen, so sharing it is safe)."""
    text = gold_answer_text(gold)
    try:
        return text, parse_answer(text), None
    except ParseError as exc:
        return text, None, str(exc)


MAX_OPTIONS = 10  # choice letters A..J


def choice_gold(answer: str, choices: Sequence[str]) -> str:
    """The gold of a multiple-choice task: its answer with its options, as one JSON object string.

    Raises:
        ValueError: no options, more than ``MAX_OPTIONS``, an option that is not a non-empty string, or an answer
            that is neither an option's letter nor one option's text.
    """
    if not 1 < len(choices) <= MAX_OPTIONS or not all(isinstance(c, str) and c.strip() for c in choices):
        raise ValueError(
            f"choices must list 2 to {MAX_OPTIONS} non-empty option texts (letters A..J), got {list(choices)[:12]!r}"
        )
    letter = re.fullmatch(r"\(?\s*([A-J])\s*\)?", answer.strip())
    if (letter is None or "ABCDEFGHIJ".index(letter.group(1)) >= len(choices)) and answer.strip() not in (
        c.strip() for c in choices
    ):
        raise ValueError(
            f"the answer {answer[:40]!r} is neither an option's letter (A..{'ABCDEFGHIJ'[len(choices) - 1]}) nor one "
            "option's text (an option index such as 0 is not a letter)"
        )
    return json.dumps({"answer": answer, "choices": list(choices)}, ensure_ascii=False)


def split_gold(gold: str) -> tuple[str, tuple[str, ...] | None]:
    """``(answer, options)`` of a gold written by ``choice_gold``; ``(gold, None)`` for any other gold."""
    if not gold.startswith('{"answer"'):
        return gold, None
    try:
        d = json.loads(gold)
    except json.JSONDecodeError:
        return gold, None
    answer, choices = d.get("answer"), d.get("choices")
    if not isinstance(answer, str) or not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        return gold, None
    return answer, tuple(choices)
