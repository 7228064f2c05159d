"""Stage 1a of math verification: find the final answer in a completion (``extract_answer``).

Pure string work in **linear time**: model text is only ever scanned by regular expressions
without nested or unbounded-overlapping quantifiers (every ``\\s`` run next to another is bounded,
``\\s{0,8}``), by ``str.find`` and by one brace-matching pass; anything shaped like an answer is cut
to ``MAX_CANDIDATE_CHARS`` before a richer pattern looks at it. A 1 MB completion of newlines,
unclosed braces or unclosed tags is read in well under a second (property test).

Extraction rules (``extract_answer``; the policy docstring of ``verifiers.math`` is the reference):
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
      ``<|endoftext|>``, ``<|eot_id|>``): what a model writes after it is another turn;
    * several *different* final answers, or hedge words ("one of", "either", "maybe", ...), give
      ``ambiguous``; there is no "last number anywhere" fallback unless asked for
      (``fallback_last_number=True``), because it rewards hedging.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

from ratchet.verifiers.math.normalize import ParseError
from ratchet.verifiers.math.parse import MAX_ANSWER_CHARS, parse_answer
from ratchet.verifiers.math.prose import (
    _HEDGE,
    _LINE_BREAK,
    _final_sentence,
    _sole_math_span,
    _sole_number,
)
from ratchet.verifiers.math.tail import HYPOTHETICAL, tail_problem

MAX_CANDIDATE_CHARS = 2 * MAX_ANSWER_CHARS  # a longer "answer" is an essay: parse_answer refuses it
MAX_BOXES = 256  # more boxes than this is spam or a list of guesses: ambiguous without reading them
MAX_DISTINCT = 32  # more different candidates than this is a list of guesses: ambiguous without parsing


@dataclass(frozen=True)
class Extraction:
    """Where the final answer was found.

    Attributes:
        text: the extracted answer text, or None.
        status: ``"ok"``, ``"no_answer"`` or ``"ambiguous"``.
        source: ``"answer_tag"``, ``"boxed"``, ``"answer_line"``, ``"answer_phrase"``, ``"final_sentence"``,
            ``"last_number"`` or ``""``.
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


# ----------------------------------------------------------------------------------------------
# answer lines and phrases

_LINE_LABEL = re.compile(
    r"[^\w\\$]{0,12}?\s{0,3}(?:final\s{1,3})?answer(?![A-Za-z])\s{0,3}(?:\*{1,3}|_{1,2})?\s{0,3}([:：]|(?=\\\[|\\\(|\$))",
    re.I,
)
_GSM_LINE = re.compile(r"####\s{0,3}([-+$\\\d(].*)")
_HEADING = re.compile(r"[#*_\s]{0,8}(?:final\s{1,3})?answer\s{0,3}[#*_:：\s]{0,8}", re.I)
_PHRASE = re.compile(
    r"answer\s{1,3}(?:is|would\s{1,3}be|will\s{1,3}be|should\s{1,3}be|=)\s{0,3}[:：]?|(?:答案|结果)\s{0,3}(?:是|为|：|:)", re.I
)
_LEAD_PHRASE = re.compile(r"(?:the\s{1,3})?(?:final\s{1,3})?answer\s{1,3}(?:is|would\s{1,3}be|will\s{1,3}be)\s{0,3}[:：]?", re.I)
_CLAUSE = re.compile(
    r"(?:\s{0,3}[,;]\s{0,3}|\s{1,3})(?:which|since|because|as|so|that|where|when|for|hence|thus|therefore|I\s+hope)\b", re.I
)
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_LAST_IS = re.compile(r".*\s(?:is|are|equals|=)\s", re.S)  # only on one bounded sentence
_FIRST_IS = re.compile(r"\s(?:is|are|equals|=)\s")
_CONCLUDES = re.compile(r"(?:\s{0,3}[,;]\s{0,3}|\s{1,3})(?:so|hence|thus|therefore)\b", re.I)
_END_OF_TURN = ("<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<｜end▁of▁sentence｜>")
_MATH_OPEN = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}


def _sentence(s: str) -> str:
    """``s`` up to its first sentence end: a full stop followed by a space or the end (not ``2.5``)."""
    i = 0
    while True:
        i = s.find(".", i)
        if i < 0:
            return s
        if i + 1 == len(s) or s[i + 1] in " \t\n" or (s[i + 1] in "$)" and i + 2 == len(s)):
            return s[:i]
        i += 1


def _value(content: str) -> str:
    """The value an answer line or phrase states: a leading math span, else its first clause."""
    s = content[:MAX_CANDIDATE_CHARS].strip().strip("*_").strip()
    m = _LEAD_PHRASE.match(s)  # "Final Answer: The final answer is $12$. I hope it is correct."
    if m:
        s = s[m.end() :].strip()
    for opener in ("$$", "$", "\\(", "\\["):
        if s.startswith(opener):
            end = s.find(_MATH_OPEN[opener], len(opener))
            while opener == "$" and end > 0 and s[end - 1] == "\\":  # "\\$" is a dollar sign, not the end
                end = s.find("$", end + 1)
            if end > 0:
                rest = s[end + len(_MATH_OPEN[opener]) :]
                then = _CONCLUDES.match(rest)
                if then and re.search(r"\d", _sentence(rest)[then.end() :]):
                    return s  # "$a = 7$, so $b = 10$": a second statement concludes the line (prose: no answer)
                if not rest.strip(" .,;。*") or rest.lstrip().startswith(".") or _CLAUSE.match(rest):
                    return s[len(opener) : end]
            break
    s = _sentence(s)
    m = _CLAUSE.search(s)
    if m and m.start() > 0 and _CONCLUDES.match(s, m.start()) and re.search(r"\d", s[m.end() :]):
        return s  # "x = 5, so y = 10": a second statement concludes the line (prose: no answer)
    cut = s[: m.start()] if m and m.start() > 0 else s
    if s[:4].lower() == "the ":  # "The volume of $V$ is 120": the value after the last "is"
        m = _LAST_IS.match(cut)
        first = _FIRST_IS.search(cut)
        if m and first is not None and first.end() < m.end() and re.search(r"\d", cut[first.end() : m.end()]):
            return s  # "the smallest is 3 and the largest is 5": two statements (prose: no answer)
        if m:
            return cut[m.end() :]
        m = _LAST_IS.match(s)  # "The number of points that could be in $D$ is 19": "that" opened the subject
        if m:
            rest = s[m.end() :]
            c = _CLAUSE.search(rest)
            return rest[: c.start()] if c and c.start() > 0 else rest
    return cut


_LINE_HINT = re.compile(r"answer|####", re.I)


def _line_at(text: str, pos: int) -> tuple[int, str] | None:
    """(start, line) of the line holding ``pos`` when ``pos`` is in its first 200 characters, else None.

    Both searches are bounded (200 characters back, ``MAX_CANDIDATE_CHARS`` forward), so a call costs
    O(1) whatever the length of the text or of the line.
    """
    back = text[max(0, pos - 200) : pos]
    breaks = list(_LINE_BREAK.finditer(back))
    if breaks:
        start = pos - len(back) + breaks[-1].end()
    elif pos <= 200:
        start = 0
    else:
        return None
    ahead = _LINE_BREAK.search(text, pos, start + MAX_CANDIDATE_CHARS)
    return start, text[start : ahead.start() if ahead else min(len(text), start + MAX_CANDIDATE_CHARS)]


_MID_FINAL = re.compile(r"(?<=[.!?$])[ \t]{1,3}(?=final\s{1,3}answer\s{0,3}[:：])", re.I)  # "... = 120. Final Answer: ..."
_DISPLAY_ONLY = {"\\[": "\\]", "$$": "$$"}


def _label_value(text: str, rest: str, line_end: int) -> str:
    """The value after an answer label: ``rest`` of its line, or a display block opened there (``Answer \\[`` newline ``9``)."""
    opener = rest.strip()
    if opener in _DISPLAY_ONLY:
        close = text.find(_DISPLAY_ONLY[opener], line_end, line_end + MAX_CANDIDATE_CHARS)
        return text[line_end:close].strip() if close > 0 else ""
    value = _value(rest)
    if value.strip(" *_") and not _parses(value):
        return _sole_number(value) or value
    return value


def _answer_lines(text: str) -> list[tuple[int, str]]:
    """``(offset, value)`` of ``Answer: X`` lines, ``#### X`` lines (GSM8K), the line after an ``Answer``
    heading and a ``Final Answer:`` label after a sentence end inside a line, in order.

    Only lines holding "answer" or "####" in their first 200 characters are looked at (one linear
    pass of a literal pattern), never every line of the text.
    """
    out: list[tuple[int, str]] = []
    seen = -1
    for hit in _LINE_HINT.finditer(text):
        if hit.start() <= seen:
            continue
        found = _line_at(text, hit.start())
        if found is None:  # deep inside a long line: nothing more on this line can be a label
            nb = _LINE_BREAK.search(text, hit.start())
            seen = nb.start() if nb else len(text)
            continue
        start, line = found
        seen = start + len(line)
        if len(out) > MAX_BOXES:  # a wall of answer lines is a list of guesses: make it ambiguous
            return [*out, (seen, f"(more than {MAX_BOXES} answer lines)")]
        gsm = _GSM_LINE.match(line) if line.startswith("####") else None  # GSM8K's final line "#### 42"
        m = _LINE_LABEL.match(line[:200]) if gsm is None else None
        value = _label_value(text, line[m.end() :], seen) if m is not None else ""
        if gsm is not None:
            out.append((start, gsm.group(1)))
        elif value.strip(" *_"):
            out.append((start, value))
        elif _HEADING.fullmatch(line[:200]):  # "### Final Answer" (value on the next non-empty line)
            nxt = next((ln for ln in text[seen : seen + MAX_CANDIDATE_CHARS].splitlines()[1:4] if ln.strip()), "")
            if nxt and "answer" not in nxt[:200].lower():
                out.append((seen, _value(nxt)))
    for mid in _MID_FINAL.finditer(text):  # a Minerva closing line run into the previous sentence
        nl = _LINE_BREAK.search(text, mid.end(), mid.end() + MAX_CANDIDATE_CHARS)
        line_end = nl.start() if nl else min(len(text), mid.end() + MAX_CANDIDATE_CHARS)
        label = _LINE_LABEL.match(text, mid.end(), line_end)
        if label is not None and all(p != mid.end() for p, _ in out):
            value = _label_value(text, text[label.end() : line_end], line_end)
            if value.strip(" *_"):
                out.append((mid.end(), value))
        if len(out) > MAX_BOXES:
            break
    return sorted(out)


def _phrase_hits(text: str) -> list[tuple[int, str]]:
    """``(offset after the value, value)`` of every "the answer is X" statement that states one, in order.

    A statement governed by a hypothesis (``Suppose the answer is 5``, ``check whether the answer is
    5``, ``If the answer is 5, ...``: ``math_tail.HYPOTHETICAL`` right before it) is not one.
    """
    out: list[tuple[int, str]] = []
    for hit in itertools.islice(_PHRASE.finditer(text), 4 * MAX_DISTINCT):
        if HYPOTHETICAL.search(text[max(0, hit.start() - 40) : hit.start()]):  # "Suppose the answer is 5"
            continue
        tail = text[hit.end() : hit.end() + MAX_CANDIDATE_CHARS]
        nl = tail.find("\n")
        value = _value(tail if nl < 0 else tail[:nl])
        at = tail.find(value.strip()) if value.strip() else -1
        out.append((hit.end() + (at + len(value.strip()) if at >= 0 else len(tail if nl < 0 else tail[:nl])), value))
    return out


def _answer_phrases(text: str) -> list[str]:
    """Value of the last "the answer is X" statement (a list of one, or empty)."""
    hits = _phrase_hits(text)
    return [hits[-1][1]] if hits else []


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
    return _decide([ex.text or ""], ex.source, restated[-1:]) if restated else ex


# ----------------------------------------------------------------------------------------------
# deciding


def _clean_candidate(s: str) -> str:
    if len(s) > MAX_CANDIDATE_CHARS:
        return s
    s = s.strip().strip("*").strip()
    label = _LINE_LABEL.match(s[:200]) if "nswer" in s[:200] else None
    if label and "\n" not in s:  # a box or tag holding an answer sentence: "Final Answer: The largest $n$ is 34."
        s = _value(s[label.end() :]).strip().strip("*").strip()
    span = _sole_math_span(s)
    if span:
        return span.rstrip(".。,;").strip()
    for opener, closer in _MATH_OPEN.items():
        if s.startswith(opener) and s.endswith(closer) and len(s) >= len(opener) + len(closer):
            s = s[len(opener) : len(s) - len(closer)].strip()
            break
    s = re.sub(r"(?<!\\)\$", "", s).strip()
    return s.rstrip(".。,;").strip()


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
            key = parse_answer(c).canonical()
        except ParseError:
            pass
        seen.setdefault(key, c)
    return list(seen.values())


def _parses(text: str) -> bool:
    """Whether ``text`` reads as a mathematical answer (prose such as "see above" does not count)."""
    try:
        return parse_answer(_clean_candidate(text)).kind != "text"
    except ParseError:
        return False


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
    return _after_final(_decide(lines or [inner], "answer_tag", rivals), visible[close:] if close else "", check_tail)


def extract_answer(completion: str, *, fallback_last_number: bool = False, check_tail: bool = True) -> Extraction:
    """Find the final answer of a completion (see the module docstring for the rules); linear time.

    Args:
        completion: the model's full output text (any length).
        fallback_last_number: opt-in: when no marked answer exists, use the last number in the
            text. Off by default because it rewards hedging and rambling.
        check_tail: apply ``math_tail`` to the text after the final answer (retraction, dangling
            label, question); off only for trusted text (a gold stored as a model solution).

    Returns:
        An ``Extraction``; ``text`` is None unless ``status == "ok"``.
    """
    for marker in _END_OF_TURN:  # the completion ends at its first end-of-turn token
        cut = completion.find(marker)
        completion = completion if cut < 0 else completion[:cut]
    visible = strip_reasoning(completion)
    tagged = _from_tags(visible, check_tail)
    if tagged is not None:
        return tagged
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
    sentence = _final_sentence(visible)
    if sentence is not None:
        return _decide([sentence], "final_sentence")
    if fallback_last_number:
        nums = _LAST_NUMBER.findall(visible[-MAX_CANDIDATE_CHARS:])
        if nums:
            return Extraction(nums[-1], "ok", "last_number", (nums[-1],))
    return Extraction(None, "no_answer", "")
