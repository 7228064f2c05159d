"""Answer lines and phrases: where a completion labels its final answer, and the value such a label states.

Used by ``extract`` (the policy docstring of ``verifiers.math.verify`` is the reference): ``Answer: X`` lines
(label case, markdown, emoji and ``Final`` ignored; ``Answer \\[ 9 \\]`` without a colon), ``A: X`` lines of
the Q:/A: few-shot format (not above ``B:`` option lines), an ``Answer`` heading with the value below it (rule
lines skipped), GSM8K's ``#### X``, a ``Final Answer:`` label after a sentence end inside a line, and "the
answer is X" phrases (not under a hypothesis, not an affirmation such as "this answer is correct"). Pure string
work in linear time: only lines holding a label hint in their first 200 characters are read, each search is
bounded by ``MAX_CANDIDATE_CHARS``, and more than ``MAX_LABEL_LINES`` labelled lines is a list of guesses.
"""

from __future__ import annotations

import itertools
import re

from ratchet.verifiers.math.extraction.prose import _BREAK_CHARS, _LINE_BREAK, _PROSE_STOP, _sole_math_span, answer_sentence_value
from ratchet.verifiers.math.extraction.tail import HYPOTHETICAL
from ratchet.verifiers.math.parsing.normalize import ParseError, prose_key
from ratchet.verifiers.math.parsing.parse import MAX_ANSWER_CHARS, parse_answer

MAX_CANDIDATE_CHARS = 2 * MAX_ANSWER_CHARS  # a longer "answer" is an essay: parse_answer refuses it
MAX_BOXES = 256  # more boxes (or answer lines) than this is spam or a list of guesses: ambiguous without reading them
MAX_LABEL_LINES = 4 * MAX_BOXES  # lines holding an answer label (filled or empty) read before it is spam: ambiguous
MAX_DISTINCT = 32  # more different candidates than this is a list of guesses: ambiguous without parsing


_LINE_LABEL = re.compile(
    r"(?:[^\w\\$]{0,12}?\s{0,3}(?:final\s{1,3})?answer(?![A-Za-z])\s{0,3}(?:\*{1,3}|_{1,2})?\s{0,3}|[ \t]{0,3}(?-i:A)[ \t]{0,2}(?=[:：]))"
    r"([:：]|(?=\\\[|\\\(|\$))",
    re.I,
)
_A_LINE = re.compile(r"[ \t]{0,3}A[ \t]{0,2}[:：]")  # the Q:/A: few-shot format of early GSM8K releases
_OPTION_LINE = re.compile(r"^[ \t]{0,3}[B-E][ \t]{0,2}[:：]", re.M)  # "A: 12 / B: 14 ...": a list of options, not an answer
_GSM_LINE = re.compile(r"####\s{0,3}([-+$\\\d(].*)")
_HEADING = re.compile(
    r"[#*_\s]{0,8}(?:\d{1,2}[.)]\s{1,3})?(?:final\s{1,3})?answer\s{0,3}[#*_:：\s]{0,8}", re.I
)  # "6.  Final answer"
_RULE_LINE = re.compile(r"[-=_*~─—\s]{3,}")  # a horizontal rule under a heading ("-----"), never the value
_ASIDE = r"(?:\s{0,3}\([^()\n]{1,40}\))?"  # "the answer (arabic numerals) is 70", "the answer (in dollars) is 18"
_PHRASE = re.compile(
    r"(?:answer|final\s{1,3}(?:value|result))"  # "The final value is: 2" (MathVista's prompt asks for a final value)
    + _ASIDE
    + r"\s{1,3}(?:is|would\s{1,3}be|will\s{1,3}be|should\s{1,3}be|=)\s{0,3}[:：]?|(?:答案|结果)\s{0,3}(?:是|为|：|:)",
    re.I,
)
_LEAD_PHRASE = re.compile(
    r"(?:the\s{1,3})?(?:final\s{1,3})?answer" + _ASIDE + r"\s{1,3}(?:is|would\s{1,3}be|will\s{1,3}be)\s{0,3}[:：]?", re.I
)
_CLAUSE = re.compile(
    r"(?:\s{0,3}[,;]\s{0,3}|\s{1,3})(?:which|since|because|as|so|that|where|when|for|hence|thus|therefore|I\s+hope)\b", re.I
)
_LAST_IS = re.compile(r".*\s(?:is|are|equals|=)\s", re.S)  # only on one bounded sentence
_FIRST_IS = re.compile(r"\s(?:is|are|equals|=)\s")
_CONCLUDES = re.compile(r"(?:\s{0,3}[,;]\s{0,3}|\s{1,3})(?:so|hence|thus|therefore)\b", re.I)
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


_LINE_HINT = re.compile(r"answer|####|(?m:^[ \t]{0,3}(?-i:A)[ \t]{0,2}[:：])", re.I)


def _next_lines(text: str, pos: int, k: int) -> list[str]:
    """The ``k`` lines after the line ending at ``pos`` (bounded: ``MAX_CANDIDATE_CHARS`` characters)."""
    out: list[str] = []
    stop = min(len(text), pos + MAX_CANDIDATE_CHARS)
    at = _LINE_BREAK.search(text, pos, stop)
    while at is not None and len(out) < k:
        nxt = _LINE_BREAK.search(text, at.end(), stop)
        out.append(text[at.end() : nxt.start() if nxt else stop])
        at = nxt
    return out


def _line_at(text: str, pos: int) -> tuple[int, str] | None:
    """(start, line) of the line holding ``pos`` when ``pos`` is in its first 200 characters, else None.

    Both searches are bounded (200 characters back, ``MAX_CANDIDATE_CHARS`` forward), so a call costs
    O(1) whatever the length of the text or of the line.
    """
    lo = max(0, pos - 200)
    last_break = max(text.rfind(c, lo, pos) for c in _BREAK_CHARS)  # "\r\n" ends at its "\n": same line start
    if last_break >= 0:
        start = last_break + 1
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
    return _read_value(rest, text[: max(0, line_end - len(rest))])


def _read_value(content: str, before: str) -> str:
    """The value of an answer marker's content (``_value``); a sentence or a labelled noun phrase is read for its one
    number (``answer_sentence_value``; ``before``: the text before the marker), whole when a clause was cut off it
    (``Jerry can last | for 45/5 = 9 weeks``)."""
    value = _value(content)
    if value.strip(" *_") and (not _parses(value) or _wordy(value)):
        last = value.rsplit("=", 1)[-1].strip(" .")  # "Total = 2 bolts of blue + 1 bolt of white = 3 bolts": the last link
        label = value.split("=", 1)[0]  # a noun phrase naming the value ("Free time left"), never "If x"
        plain = _wordy(label) and not _PROSE_STOP.search(value) and "," not in value
        linked = last if "=" in value and plain and _LAST_LINK.fullmatch(last) and _parses(last) else None
        return (
            answer_sentence_value(value, before) or answer_sentence_value(_sentence(content.strip()), before) or linked or value
        )
    return value


def _wordy(value: str) -> bool:
    """Whether an answer's value is a sentence or a labelled noun phrase rather than math (``y = 31 ducks were left``,
    ``Number of pears Ana picked = 48``): two or more words, no math delimiters."""
    return "$" not in value and "\\" not in value and len(re.findall(r"[A-Za-z]{2,}", value)) >= 2


def _answer_lines(text: str, kinds: tuple[str, ...] = ("label", "gsm8k")) -> list[tuple[int, str]]:
    """``(offset, value)`` of ``Answer: X`` lines, ``A: X`` lines (Q:/A: few-shot format; not when ``B:`` ...
    lines list options), ``#### X`` lines (GSM8K), the line after an ``Answer`` heading and a ``Final Answer:``
    label after a sentence end inside a line, in order. ``kinds``: ``"label"`` (every labelled line) and/or
    ``"gsm8k"`` (``####`` lines).

    Only lines holding "answer", "####" or a leading ``A:`` in their first 200 characters are looked at (one
    linear pass of a literal pattern), never every line of the text.
    """
    out: list[tuple[int, str]] = []
    seen, looked = -1, 0
    options = _OPTION_LINE.search(text) is not None
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
        looked += 1
        if len(out) > MAX_BOXES or looked > MAX_LABEL_LINES:  # a wall of answer lines is a list of guesses: ambiguous
            return [*out, (seen, f"(more than {MAX_BOXES} answer lines)")]
        gsm = _GSM_LINE.match(line) if line.startswith("####") else None  # GSM8K's final line "#### 42"
        m = _LINE_LABEL.match(line[:200]) if gsm is None and "label" in kinds else None
        a_line = m is not None and _A_LINE.match(line) is not None
        if a_line and options:
            m = None  # "A: 12" above "B: 14": an option, not an answer
        value = _label_value(text, line[m.end() :], seen) if m is not None else ""
        if a_line and value and not _parses(value):
            value = ""  # "A: Let's think step by step.": the turn's opening words, not a final answer
        if gsm is not None:
            if "gsm8k" in kinds:
                out.append((start, gsm.group(1)))
        elif value.strip(" *_"):
            out.append((start, value))
        elif "label" in kinds and _HEADING.fullmatch(line[:200]):  # "### Final Answer" (value on the next non-empty line)
            below = _next_lines(text, seen, 5)
            nxt = next((ln for ln in below if ln.strip() and not _RULE_LINE.fullmatch(ln)), "")
            value = _read_value(nxt, text[:seen]) if nxt and "answer" not in nxt[:200].lower() else ""  # as on its own line
            if value and (_parses(value) or prose_key(value) is not None):  # a section of working is no answer line
                out.append((seen, value))
    for mid in _MID_FINAL.finditer(text) if "label" in kinds else ():  # a Minerva closing line run into the previous sentence
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


_AFFIRMATION = re.compile(
    r"(?:indeed\s{1,3}|also\s{1,3}|definitely\s{1,3})?(?:correct|right|verified|confirmed|accurate|valid|consistent|reasonable)[\s.!*]{0,4}",
    re.I,
)


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
        line, base = (tail, 0) if nl < 0 else (tail[:nl], 0)
        if nl >= 0 and not line.strip(" \t*_"):  # "the correct answer is:" ends its line: the value is on the next one
            nxt = tail[nl + 1 :].split("\n", 1)[0]
            line, base = nxt, nl + 1
        value = _value(line)
        if _AFFIRMATION.fullmatch(value.strip()):  # "This answer is correct.": an affirmation, not a rival answer
            continue
        at = tail.find(value.strip(), base) if value.strip() else -1
        out.append((hit.end() + (at + len(value.strip()) if at >= 0 else base + len(line)), value))
    return out


def _answer_phrases(text: str) -> list[str]:
    """Value of the last "the answer is X" statement (a list of one, or empty)."""
    hits = _phrase_hits(text)
    return [hits[-1][1]] if hits else []


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


def _parses(text: str) -> bool:
    """Whether ``text`` reads as a mathematical answer (prose such as "see above" does not count)."""
    try:
        return parse_answer(_clean_candidate(text)).kind != "text"
    except ParseError:
        return False


_LAST_LINK = re.compile(r"[-+]?\$?\d[\d,]*(?:\.\d+)?(?:\s{1,3}[A-Za-z]{1,20}){0,2}")  # "3 bolts", "5 hours"
_SOLUTION = re.compile(r"(?im)^[ \t#*]{0,8}solution[ \t*]{0,3}[:：][ \t*]{0,3}")
_PLAN = re.compile(
    r"\b(?:first|need|needs|find|let|let's|we|will|shall|calculate|compute|determine|step|plan|solve|suppose|assume|"
    r"consider|given|denote|define)\b",
    re.I,
)


def solution_statement(text: str) -> str | None:
    """The value of the closing statement under a ``Solution:`` label, when that statement is all that follows it
    (``Solution:`` newline ``Lena has 23 stickers now.``): one finished line with no plan or setup word; a
    ``Solution:`` that opens working (more lines, ``First, we find ...``, ``Let x be ...``) is no answer marker. Only the last ``MAX_CANDIDATE_CHARS`` characters are read; None otherwise."""
    tail = text.rstrip()[-MAX_CANDIDATE_CHARS:]
    label = None
    for label in _SOLUTION.finditer(tail):  # noqa: B007 (the last label)
        pass
    rest = tail[label.end() :].strip() if label is not None else ""
    if not rest or _LINE_BREAK.search(rest) or not rest.endswith((".", "!", "。")) or _PLAN.search(rest):
        return None  # working that opens, a plan or a setup ("First, we find ...", "Let x be ..."): not a statement
    value = _label_value(text, rest, len(text))
    return value if value.strip(" *_") and _parses(value) else None
