"""Stage 1a of math verification: find the final answer in a completion (``extract_answer``).

Pure string work in **linear time**: model text is only ever scanned by regular expressions
without nested or unbounded-overlapping quantifiers (every ``\\s`` run next to another is bounded,
``\\s{0,8}``), by ``str.find`` and by one brace-matching pass; anything shaped like an answer is cut
to ``MAX_CANDIDATE_CHARS`` before a richer pattern looks at it. A 1 MB completion of newlines,
unclosed braces or unclosed tags is read in well under a second (property test).

Extraction rules (``extract_answer``; the policy docstring of ``verifiers.math.verify`` is the reference):
    * text inside ``<think>...</think>`` (and thinking/reasoning/... tags) is never graded; an
      unclosed opening tag hides the rest, a stray closing tag hides everything before it;
    * if there are ``<answer>...</answer>`` blocks, only their content is graded; several different
      ones are ``ambiguous``; an **unclosed** ``<answer>`` after a closed one is a malformed final
      answer (no credit, never the earlier one); a lone unclosed ``<answer>`` (generation stopped at
      the closing tag) runs to the end;
    * otherwise the ``\\boxed{}``/``\\fbox{}`` answers: the **last** box is the final attempt, so a
      truncated (unclosed) or empty last box after an earlier answer gives no credit; boxes that are
      all empty (``put the answer in \\boxed{}`` quoted from the instructions) are ignored; ``\\boxed 5``
      is a box, ``\\boxed and`` is not;
    * ``Answer: X`` lines (label case, markdown, emoji and ``Final`` ignored; ``Answer \\[ 9 \\]``
      without a colon; a heading ``### Final Answer`` takes the next line; a ``Final Answer:`` label
      after a sentence end inside a line): an answer line after the last box wins over the boxes
      (the last explicit final answer wins), lines before the last box were working; otherwise the
      last "the answer is X" statement; otherwise the last sentence when it states one math span
      (``_final_sentence``). The Minerva closing line ``Final Answer: The final answer is $X$.
      I hope it is correct.`` gives ``X``;
    * the completion ends at its first end-of-turn token (``<|im_end|>``, ``<|im_start|>``,
      ``<|endoftext|>``, ``<|eot_id|>``): what a model writes after it is another turn; and at an invented
      next exercise (``Q:``/``Question:``/``Problem:`` line after an answer marker, ``cut_invented_question``);
    * a JSON ``"answer"`` field (``_from_json``) ranks after the answer tag and before the boxes; a box outside
      it that disagrees makes it ``ambiguous``; ``answer_format`` other than ``"auto"`` reads one marker only
      (``_declared``);
    * several *different* final answers, or hedge words ("one of", "either", "maybe", ...), give
      ``ambiguous``; there is no "last number anywhere" fallback unless asked for
      (``fallback_last_number=True``), because it rewards hedging.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ratchet.verifiers.math.extraction.lines import (
    MAX_BOXES,
    MAX_CANDIDATE_CHARS,
    MAX_DISTINCT,
    MAX_LABEL_LINES,
    _answer_lines,
    _answer_phrases,
    _clean_candidate,
    _parses,
    _phrase_hits,
    _sentence,
    solution_statement,
)
from ratchet.verifiers.math.extraction.prose import _HEDGE, _final_sentence, answer_sentence_value
from ratchet.verifiers.math.extraction.tail import has_retraction, tail_problem
from ratchet.verifiers.math.parsing.normalize import ParseError
from ratchet.verifiers.math.parsing.parse import _SYMBOL, Answer, parse_answer

__all__ = [
    "ANSWER_FORMATS",
    "MAX_BOXES",
    "MAX_CANDIDATE_CHARS",
    "MAX_DISTINCT",
    "MAX_LABEL_LINES",
    "AnswerFormat",
    "Box",
    "Extraction",
    "cut_invented_question",
    "extract_answer",
    "find_boxed",
    "find_boxes",
    "strip_reasoning",
]


@dataclass(frozen=True)
class Extraction:
    """Where the final answer was found.

    Attributes:
        text: the extracted answer text, or None.
        status: ``"ok"``, ``"no_answer"`` or ``"ambiguous"``.
        source: ``"answer_tag"``, ``"json"``, ``"boxed"``, ``"answer_line"``, ``"gsm8k"``, ``"answer_phrase"``,
            ``"final_sentence"``, ``"last_number"`` or ``""``.
        candidates: every distinct candidate seen (several -> ambiguous).
        problem: why a found final answer is malformed (truncated or empty box, unclosed tag), or ``""``.
    """

    text: str | None
    status: Literal["ok", "no_answer", "ambiguous"]
    source: str = ""
    candidates: tuple[str, ...] = ()
    problem: str = ""


# ----------------------------------------------------------------------------------------------
# tags: bounded whitespace runs, so "<" followed by 10^5 spaces is one linear scan

_REASONING_TAG = re.compile(
    r"<\s{0,8}(/?)\s{0,8}(?:think|thinking|thought|thoughts|reasoning|reflection|scratchpad)\s{0,8}>"
    r"|<\|(begin|end)_of_thought\|>",  # OpenThoughts / Bespoke-Stratos markers
    re.I,
)
_ANSWER_TAG = re.compile(r"<\s{0,8}(/?)\s{0,8}answer\s{0,8}>", re.I)


def strip_reasoning(text: str) -> str:
    """The completion without its reasoning blocks (one left-to-right pass over the tags)."""
    parts: list[str] = []
    pos, inside = 0, False
    for m in _REASONING_TAG.finditer(text):
        if m.group(1) or m.group(2) == "end":  # a closing tag
            if not inside:
                parts = []  # a stray closing tag hides everything before it
            inside, pos = False, m.end()
        elif not inside:
            parts.append(text[pos : m.start()])
            inside = True
    if not inside:
        parts.append(text[pos:])
    return " ".join(parts)


def _answer_blocks(text: str) -> tuple[list[str], str | None, str]:
    """(closed ``<answer>`` contents, content of a trailing unclosed tag or None, text outside the blocks)."""
    closed: list[str] = []
    outside: list[str] = []
    pos, open_at = 0, -1
    for m in _ANSWER_TAG.finditer(text):
        if not m.group(1):
            if open_at < 0:
                outside.append(text[pos : m.start()])
            open_at = m.end()  # a second opening tag restarts the block
        elif open_at >= 0:
            closed.append(text[open_at : m.start()])
            open_at, pos = -1, m.end()
    if open_at >= 0:
        return closed, text[open_at:], " ".join(outside)
    outside.append(text[pos:])
    return closed, None, " ".join(outside)


# ----------------------------------------------------------------------------------------------
# boxes: one brace-matching pass, then O(1) per box


class Box(NamedTuple):
    """One ``\\boxed``/``\\fbox`` in a text: ``start``/``end`` offsets, ``content`` (None when unclosed or too long)."""

    start: int
    end: int
    content: str | None


_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BARE_BOX_TOKEN = re.compile(r"\s{1,8}([+-]?\d[^\s$]*)|([+-]\d[^\s$]*)|(\d[^\s$]*)")


def _close_brace(text: str, open_at: int, stop: int) -> int:
    """Offset of the ``}`` matching the ``{`` at ``open_at``, searching ``text[open_at:stop]``; -1 if none."""
    close = text.find("}", open_at, stop)
    if close < 0 or text.find("{", open_at + 1, close) < 0:
        return close  # no closing brace at all, or no nested group: the common case, at C speed
    depth = 0
    for m in re.finditer(r"[{}]", text[open_at:stop]):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return open_at + m.start()
    return -1


def find_boxes(text: str) -> list[Box]:
    """Every ``\\boxed``/``\\fbox`` answer in ``text``, in order (see ``Box``); linear time.

    ``\\boxed{...}`` takes balanced braces; ``\\boxed 5`` takes one number token; ``\\boxed`` followed
    by a word or by nothing is not a box. A box's braces are only followed up to the next box (a box
    that holds the next one is an outer box, dropped by ``find_boxed``) and ``MAX_CANDIDATE_CHARS``,
    so every character is scanned at most once.
    """
    hits = list(itertools.islice(_BOX.finditer(text), MAX_BOXES + 1))
    if len(hits) > MAX_BOXES:  # not read: see _from_boxes
        return [Box(m.start(), m.end(), None) for m in hits]
    boxes: list[Box] = []
    for k, m in enumerate(hits):
        i = m.end()
        j = i
        while j < len(text) and j - i < 8 and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            stop = min(len(text), j + MAX_CANDIDATE_CHARS, hits[k + 1].start() if k + 1 < len(hits) else len(text))
            close = _close_brace(text, j, stop)
            if close < 0:
                boxes.append(Box(m.start(), stop + 1, None))
            else:
                boxes.append(Box(m.start(), close + 1, text[j + 1 : close].strip()))
            continue
        tok = _BARE_BOX_TOKEN.match(text[i : i + 64])
        if tok:
            boxes.append(Box(m.start(), i + tok.end(), next(g for g in tok.groups() if g)))
    return boxes


def find_boxed(text: str) -> list[str]:
    """Contents of every closed box in ``text`` (outer boxes that hold another box left out), in order."""
    return [b.content for b in _innermost(find_boxes(text)) if b.content is not None]


def _innermost(boxes: list[Box]) -> list[Box]:
    """Drop boxes whose span holds the next box (``\\boxed{\\boxed{3}}``, or an unclosed box before another)."""
    return [b for k, b in enumerate(boxes) if k + 1 == len(boxes) or boxes[k + 1].start >= b.end]


_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_END_OF_TURN = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<｜end▁of▁sentence｜>")


def _after_final(ex: Extraction, tail: str, check: bool = True) -> Extraction:
    """``ex`` unless the text after its final answer takes the credit away (see ``math_tail``)."""
    if ex.status != "ok" or not check:
        return ex
    problem, at = tail_problem(tail)
    if problem == "dangling":
        return Extraction(None, "no_answer", ex.source, ex.candidates, "the final answer label after the answer is empty")
    if problem == "question":
        return Extraction(None, "ambiguous", ex.source, ex.candidates, "the final answer is asked, not stated")
    restated = [v for _, v in _phrase_hits(tail[at:]) if _parses(v)]  # "... the answer is 6" after it: a rival
    if problem == "retracted" and not restated:
        return Extraction(None, "ambiguous", ex.source, ex.candidates, "the final answer is taken back after it")
    if not restated:
        return ex
    decided = _decide([ex.text or ""], ex.source, restated[-1:])
    if problem and decided.status == "ambiguous":  # taken back, then another answer: a retraction, never a choice pair
        return Extraction(None, "ambiguous", ex.source, decided.candidates, "the final answer is taken back, then another stated")
    return decided


# ----------------------------------------------------------------------------------------------
# deciding


_NAME = re.compile(_SYMBOL)


def _value_key(a: Answer) -> str:
    """What a candidate states, for telling candidates apart: ``m = 2`` states ``2`` (an assignment to one name
    is its value), so ``\\boxed{m = 2}`` and ``\\boxed{2}`` are one answer written twice, not two answers."""
    if a.kind == "relation" and a.value[1] == "=" and _NAME.fullmatch(a.value[0]):  # type: ignore[index]
        return a.value[2].canonical()  # type: ignore[index]
    return a.canonical()


def _distinct(cands: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    raw: dict[str, None] = dict.fromkeys(cands)
    if len(raw) == 1:
        return list(raw)
    if len(raw) > MAX_DISTINCT:
        return list(raw)[: MAX_DISTINCT + 1]
    for c in raw:
        key = re.sub(r"\s+|\$", "", c)
        try:
            key = _value_key(parse_answer(c))
        except ParseError:
            pass
        seen.setdefault(key, c)
    return list(seen.values())


def _decide(cands: list[str], source: str, rivals: list[str] | None = None) -> Extraction:
    """One final answer from ``cands``; ``rivals`` (answers stated elsewhere) can only make it ambiguous."""
    cands = [c for c in (_clean_candidate(c) for c in cands) if c]
    if not cands:
        return Extraction(None, "no_answer", source)
    rival = [c for c in (_clean_candidate(r) for r in rivals or []) if c]
    distinct = _distinct(cands + rival)
    if len(distinct) > 1:
        return Extraction(None, "ambiguous", source, tuple(distinct))
    text = distinct[0]
    if _HEDGE.search(text[:MAX_CANDIDATE_CHARS]):
        return Extraction(None, "ambiguous", source, (text,))
    return Extraction(text, "ok", source, (text,))


def _from_boxes(boxes: list[Box], source: str, rivals: list[str]) -> Extraction | None:
    """The boxed answer, a malformed-final verdict, or None when there is no real box."""
    if len(boxes) > MAX_BOXES:
        return Extraction(None, "ambiguous", source, (), f"more than {MAX_BOXES} \\boxed answers")
    boxes = _innermost(boxes)
    filled = [b.content for b in boxes if b.content]
    if not boxes or (not filled and all(b.content == "" for b in boxes)):
        return None  # no box, or only empty boxes quoted from the instructions
    last = boxes[-1]
    if last.content is None:
        return Extraction(None, "no_answer", source, tuple(filled[-3:]), "the final \\boxed{...} is not closed")
    if last.content == "":
        return Extraction(None, "no_answer", source, tuple(filled[-3:]), "the final \\boxed{} is empty")
    return _decide(filled, source, rivals)


def _from_tags(visible: str, check_tail: bool = True) -> Extraction | None:
    closed, unclosed, outside = _answer_blocks(visible)
    if not closed and unclosed is None:
        return None
    if closed and unclosed is not None:
        return Extraction(None, "no_answer", "answer_tag", tuple(closed[-3:]), "the final <answer> tag is not closed")
    blocks = closed or [unclosed or ""]
    if len(_distinct([c for c in (_clean_candidate(t) for t in blocks) if c])) > 1:
        return Extraction(None, "ambiguous", "answer_tag", tuple(b[:200] for b in blocks[:8]))
    inner = blocks[-1]
    rivals = [b for b in find_boxed(outside) if b]  # a box outside the tag is a second final answer
    close = 0  # the text after the last </answer> can take the answer back too ("</answer> Wait, 6.")
    for m in _ANSWER_TAG.finditer(visible) if closed else ():
        close = m.end() if m.group(1) else close
    boxes = find_boxes(inner)
    boxed = _from_boxes(boxes, "answer_tag", rivals)
    if boxed is not None:
        last = _innermost(boxes)[-1].end if boxed.status == "ok" else len(inner)
        return _after_final(_after_final(boxed, inner[last:], check_tail), visible[close:] if close else "", check_tail)
    lines = [v for _, v in _answer_lines(inner)] or _answer_phrases(inner)
    if not lines and not _parses(inner):  # "<answer>Each friend gets 6.</answer>": the sentence's one value
        lines = [v for v in [answer_sentence_value(_sentence(_clean_candidate(inner)))] if v]
    return _after_final(_decide(lines or [inner], "answer_tag", rivals), visible[close:] if close else "", check_tail)


# a base model going on with an invented next exercise ("Q: Tom has 4 cars", "Problem:", "Question 2:") after its answer
_NEXT_QUESTION = re.compile(r"^[ \t#*]{0,8}(?:Q|Question|Problem|Exercise)(?:[ \t]{0,3}\d{1,3})?[ \t]{0,3}[:：]", re.M)
_ANSWERED = re.compile(
    r"\\boxed|\\fbox|answer(?:\s{0,3}\([^()\n]{0,40}\))?\s{0,3}(?:is|:|：|>)|####|^[ \t]{0,3}A[ \t]{0,2}[:：]|\"answer\"",
    re.I | re.M,
)


def cut_invented_question(text: str) -> str:
    """``text`` up to the first line that opens a new exercise (``Q:``, ``Question:``, ``Problem:``) after an
    answer marker: what a base model writes after its answer to the asked question answers a question it
    made up, and is never graded (neither as the answer nor as a rival), unless it holds a retraction word
    (``math_tail.has_retraction``: a self-question that takes the answer back is kept). Linear time."""
    answered = _ANSWERED.search(text)  # the first answer marker: one linear scan
    if answered is None:
        return text
    m = _NEXT_QUESTION.search(text, answered.end())
    if m is None:
        return text
    # "Q: Is that right? Wait, no: it is 6" questions the answer: kept, so the retraction counts
    return text if has_retraction(text[m.start() :]) else text[: m.start()]


# a JSON "answer" field (structured-output prompts): a string (escapes read by json) or a bare number / truth value
_JSON_ANSWER = re.compile(
    r'"(?:final_answer|final answer|answer)"\s{0,8}:\s{0,8}("(?:[^"\\\n]|\\.){0,2000}"|-?\d[\d,]{0,60}(?:\.\d{1,60})?(?:[eE][-+]?\d{1,4})?\b|true\b|false\b)',
    re.I,
)


def _json_answers(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, value)`` of every JSON ``"answer"`` field in ``text`` (at most ``MAX_BOXES + 1``)."""
    out = []
    for m in itertools.islice(_JSON_ANSWER.finditer(text), MAX_BOXES + 1):
        raw = m.group(1)
        try:
            value = json.loads(raw) if raw.startswith('"') else raw
        except ValueError:  # a malformed escape: the text between the quotes
            value = raw[1:-1]
        out.append((m.start(1), m.end(1), str(value)))
    return out


def _from_json(visible: str, check_tail: bool, declared: bool) -> Extraction | None:
    """The JSON answer field's value; several different ones, or (``auto``) a box outside them that disagrees,
    make it ``ambiguous``. None when there is no answer field."""
    fields = _json_answers(visible)
    if not fields:
        return None
    if len(fields) > MAX_BOXES:
        return Extraction(None, "ambiguous", "json", (), f"more than {MAX_BOXES} JSON answer fields")
    outside = "".join(visible[a:b] for a, b in zip([0] + [e for _, e, _ in fields], [s for s, _, _ in fields] + [len(visible)]))
    rivals = [] if declared else [b for b in find_boxed(outside) if b]
    values = [v for _, _, v in fields]
    inner = [_json_value(v) for v in values]
    ex = _decide(inner, "json", rivals)
    return _after_final(ex, visible[fields[-1][1] :], check_tail)


def _json_value(value: str) -> str:
    """The answer a JSON answer field's string states: its box, answer line, or sentence's one value, else itself."""
    boxed = find_boxed(value)
    if boxed:
        return boxed[-1]
    if not _parses(value):
        sentence = answer_sentence_value(_sentence(_clean_candidate(value)))
        if sentence:
            return sentence
    return value


AnswerFormat = Literal["auto", "boxed", "answer_line", "json", "gsm8k"]
ANSWER_FORMATS: tuple[str, ...] = ("auto", "boxed", "answer_line", "json", "gsm8k")


def _declared(visible: str, answer_format: str, check_tail: bool) -> Extraction:
    """Extraction when the task declares its answer format: only that marker is read (others are working)."""
    if answer_format == "json":
        return _from_json(visible, check_tail, True) or Extraction(None, "no_answer", "json")
    if answer_format == "boxed":
        boxes = find_boxes(visible)
        boxed = _from_boxes(boxes, "boxed", [])
        if boxed is None:
            return Extraction(None, "no_answer", "boxed")
        inner = _innermost(boxes)
        return _after_final(boxed, visible[inner[-1].end :] if boxed.status == "ok" else "", check_tail)
    found = _answer_lines(visible, ("gsm8k",) if answer_format == "gsm8k" else ("label",))
    if not found:
        return Extraction(None, "no_answer", answer_format)
    lines = list(dict.fromkeys(v for _, v in found))[: MAX_DISTINCT + 1]
    pos, value = found[-1]
    at = visible.find(value.strip(), pos, pos + MAX_CANDIDATE_CHARS) if value.strip() else -1
    tail = visible[at + len(value.strip()) if at >= 0 else pos :]
    return _after_final(_decide(lines, answer_format), tail, check_tail)


def extract_answer(
    completion: str, *, fallback_last_number: bool = False, check_tail: bool = True, answer_format: str = "auto"
) -> Extraction:
    """Find the final answer of a completion (see the module docstring for the rules); linear time.

    Args:
        completion: the model's full output text (any length).
        fallback_last_number: opt-in: when no marked answer exists, use the last number in the
            text. Off by default because it rewards hedging and rambling.
        check_tail: apply ``math_tail`` to the text after the final answer (retraction, dangling
            label, question); off only for trusted text (a gold stored as a model solution).
        answer_format: the marker the task asks for (``ANSWER_FORMATS``): ``"auto"`` reads every marker
            in the precedence of the module docstring; ``"boxed"``, ``"answer_line"`` (``Answer:``/``A:``
            lines), ``"json"`` (an ``"answer"`` field) or ``"gsm8k"`` (``#### X``) read only that one.

    Returns:
        An ``Extraction``; ``text`` is None unless ``status == "ok"``.

    Raises:
        ValueError: ``answer_format`` is not one of ``ANSWER_FORMATS``.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format {answer_format!r} is unknown; use one of {', '.join(ANSWER_FORMATS)}")
    for marker in _END_OF_TURN:  # the completion ends at its first end-of-turn token
        cut = completion.find(marker)
        completion = completion if cut < 0 else completion[:cut]
    visible = cut_invented_question(strip_reasoning(completion))
    if answer_format != "auto":
        return _declared(visible, answer_format, check_tail)
    tagged = _from_tags(visible, check_tail)
    if tagged is not None:
        return tagged
    structured = _from_json(visible, check_tail, False)
    if structured is not None:
        return structured
    found = _answer_lines(visible)
    boxes = find_boxes(visible)
    # the last explicit final answer wins: an answer line after the last box (boxes before it were
    # working), else the boxes (answer lines before the last box were working)
    inner = _innermost(boxes) if len(boxes) <= MAX_BOXES else []
    last_box = inner[-1].end if any(b.content != "" for b in inner) else -1  # boxes all empty: quoted instructions
    after = [v for pos, v in found if pos >= last_box and "boxed" not in v and (last_box < 0 or _parses(v))]
    boxed = None if after and last_box >= 0 else _from_boxes(boxes, "boxed", [])
    if boxed is not None:
        return _after_final(boxed, visible[inner[-1].end :] if inner else "", check_tail)
    lines = list(dict.fromkeys(after if last_box >= 0 else [v for _, v in found]))[: MAX_DISTINCT + 1]
    if lines:
        pos, value = found[-1]
        at = visible.find(value.strip(), pos, pos + MAX_CANDIDATE_CHARS) if value.strip() else -1
        tail = visible[at + len(value.strip()) if at >= 0 else pos :]
        return _after_final(_decide(lines, "answer_line"), tail, check_tail)
    hits = _phrase_hits(visible)
    if hits:  # the last statement; an earlier one that states another value is a rival
        rivals = [v for _, v in hits[:-1] if _parses(v)][-MAX_DISTINCT:]
        return _after_final(_decide([hits[-1][1]], "answer_phrase", rivals), visible[hits[-1][0] :], check_tail)
    solution = solution_statement(visible)
    if solution is not None:  # "Solution:" above one closing statement
        return _decide([solution], "answer_line")
    sentence = _final_sentence(visible)
    if sentence is not None:
        return _decide([sentence], "final_sentence")
    if fallback_last_number:
        nums = _LAST_NUMBER.findall(visible[-MAX_CANDIDATE_CHARS:])
        if nums:
            return Extraction(nums[-1], "ok", "last_number", (nums[-1],))
    return Extraction(None, "no_answer", "")


def read_span(completion: str) -> int | None:
    """How many leading characters of ``completion`` the math verifier reads, or None when it reads them all.

    Reading stops at the first end-of-turn token (what follows is another turn) and at an invented next exercise
    after the answer (``cut_invented_question``; looked for after the last reasoning block, where the answer is).
    What lies past the span was never graded, so it is never trained on (``verdicts.read_chars``). Linear time.
    """
    end = len(completion)
    for marker in _END_OF_TURN:
        cut = completion.find(marker, 0, end)
        end = end if cut < 0 else cut
    start = 0
    for m in _REASONING_TAG.finditer(completion, 0, end):
        if m.group(1) or m.group(2) == "end":  # the answer follows the last closing reasoning tag
            start = m.end()
    end = start + len(cut_invented_question(completion[start:end]))
    return None if end >= len(completion) else end
