"""Prose around a final answer: the one math span of a sentence, the one number of a prose final-answer
sentence, the last sentence of a completion, and the hedge words that make any of them ``ambiguous``.

Used by ``math_extract``; pure string work in linear time (every pattern is applied to a text already
cut to ``MAX_PROSE_CHARS`` or scanned once with bounded quantifiers).
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_PROSE_CHARS = 300  # a prose final answer longer than this is an explanation, not an answer

_HEDGE = re.compile(
    r"(?i)\b(?:one\s+of|either|maybe|perhaps|possibly|probably|might\s+be|could\s+be|not\s+sure|or\s+maybe|i\s+think|guess)\b|\?\s{0,8}$"
)
_LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines splits on
_BREAK_CHARS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # the characters of _LINE_BREAK


_COMPARATIVE = re.compile(
    r"\b(?:less|more|fewer|greater|smaller|larger|than|times|twice|half|double|triple|negative|minus|plus|per\s+cent|"
    r"least|most|up\s+to|below|above|under|over|between)\b",
    re.I,
)
_NUMBER_TOKEN = re.compile(
    r"(?<![\w.,])[-−]?\d{1,3}(?:,\d{3})*(?:\.\d+)?(?![\w.,]*\d)(?![A-Za-z])|(?<![\w.,])[-−]?\d+(?:\.\d+)?(?![\w.,]*\d)(?![A-Za-z])"
)


_OPS = {"–": "-", "−": "-", "×": "*", "·": "*", "⋅": "*", "÷": "/", "\u2003": " ", "\u2002": " ", "\u00a0": " "}
_UNICODE_OPS = re.compile("|".join(map(re.escape, _OPS)))
_COMPUTED = r"[\d\s+\-*/^().,]*\d[\s)]*[-+*/^][\s(]*\d[\d\s+\-*/^().,]*"  # arithmetic on numbers: "3 + 57 + 2"
# "for 45/5 = 9 weeks": a computation inside the sentence, before the value it gives (the value is what is stated)
_INNER_CHAIN = re.compile(r"(?<![\w.])" + _COMPUTED + r"=\s{0,3}(?=[-+]?\d)")
# a leading step or list label is no number of the sentence ("Step 2: The red car went 14 miles farther ...")
_STEP_LEAD = re.compile(r"\s{0,3}(?:(?:step|part)\s{0,3}\d{1,2}\s{0,3}[:.)]|\d{1,2}[.)](?=\s{1,3}[A-Z]))\s{0,3}", re.I)
# "8 more trees than Ferdinand", "14 miles farther than the blue car", "4 more cups": the number is a difference, the answer to a
# "how many more / how much farther" question; any other comparison or bound word still refuses the sentence
_DIFFERENCE = re.compile(
    r"(\d[\d,]*(?:\.\d+)?\s{1,3}(?:[A-Za-z'-]{1,20}\s{1,3}){0,2}?)(?:more|fewer|less|farther|further|longer|shorter|"
    r"taller|older|younger|higher|lower|heavier|lighter|faster|slower|bigger|larger|smaller|greater|cheaper)\b"
    r"(?:([^.\d]{0,80}?)\bthan\b)?",  # "4 more cups of flour": more than before, the same difference
    re.I,
)
# words right after a number that change its value ("3 hundred", "5 squared", "2 thirds"): never a sole number
_VALUE_WORD = re.compile(
    r"[\s-]{0,3}(?:hundred|thousand|million|billion|trillion|dozen|score|gross|squared|cubed|factorial|half|halves|"
    r"thirds?|quarters?|fourths?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?|hundredths?|thousandths?|times|"
    r"fold)s?\b",
    re.I,
)
# a number that restates a condition of the question ("36 miles in 4 hours", "6 rows with 5 pencils in each row")
# (never a ratio, "1 in 6": the word after a number, and a number followed by a noun)
_CONDITION_NUMBER = re.compile(
    r"(?<![\d\s])\s{1,3}(?:in|for|with|within|after|every)\s{1,3}(\d[\d,]*(?:\.\d+)?)(?![\w.,]*\d)(?=\s{1,3}[A-Za-z])", re.I
)


def _plain_sentence(s: str) -> tuple[str, bool]:
    """``s`` with what is no value of its own taken out: a leading step label, a currency sign (``$75``), the
    computation before a value (``45/5 = 9``) and the comparison words around a difference (``8 more ... than``);
    and whether it stated a difference."""
    s = s[_STEP_LEAD.match(s).end() :] if _STEP_LEAD.match(s) else s  # type: ignore[union-attr]
    if s.count("$") == 1:
        s = re.sub(r"(?<!\\)\$(?=\d)", "", s)  # "$75": a dollar sign, not math
    s = _INNER_CHAIN.sub("", _UNICODE_OPS.sub(lambda m: _OPS[m.group()], s))
    diff = _DIFFERENCE.search(s)
    return (s[: diff.start()] + diff.group(1) + (diff.group(2) or "") + s[diff.end() :], True) if diff else (s, False)


def _computed_before(value: str, before: str) -> bool:
    """Whether ``before`` states ``value`` as the result of a computation or statement (``= 45``, ``>>45``, ``is 45``)."""
    computed = re.compile(
        r"(?:=|>>|\bis|\bare|\bequals|\bgives)\s{0,3}\\?\$?\s{0,3}" + re.escape(value.replace(",", "")) + r"(?![\d,]*\d|\.\d)"
    )
    return computed.search(before.replace(",", "")) is not None


def _sole_number(s: str, context: str = "") -> str | None:
    """The one number of a prose final-answer sentence (``Jane started growing it 3 hours ago``), or None.

    Only for a short sentence with no math, exactly one number (not an ordinal such as ``3rd``, not followed by a
    word that changes it, ``3 hundred``) and no negation, hedge, condition or comparison word (``not 3``, ``3 more
    than``, ``maybe 3``); read past a step label, a currency sign, a computation before the value (``for 45/5 = 9
    weeks``) and the words of a difference (``14 miles farther than``). With ``context`` (the text before the
    sentence), numbers that restate a condition (``36 miles in 4 hours``: after ``in``/``for``/``with``/...) and
    appear in it are passed over; a difference counts only when ``context`` computed it.
    """
    if len(s) > MAX_PROSE_CHARS:
        return None
    s, difference = _plain_sentence(s)
    if "$" in s or "\\" in s or not re.search(r"[A-Za-z]{2,}", s):
        return None
    if sum(c.isdigit() for c in s) == 0 or _PROSE_STOP.search(s) or _COMPARATIVE.search(s) or _HEDGE.search(s):
        return None
    nums = _NUMBER_TOKEN.findall(s)
    conditions = [m.group(1) for m in _CONDITION_NUMBER.finditer(s)] if len(nums) > 1 and context else []
    if conditions and all(re.search(r"(?<![\w.,])" + re.escape(c) + r"(?![\d,]*\d)", context) for c in conditions):
        nums = [n for n in nums if n not in conditions]
    digits = sum(c.isdigit() for c in s) - sum(c.isdigit() for c in "".join(conditions if len(nums) == 1 else []))
    if len(nums) != 1 or sum(c.isdigit() for c in nums[0]) != digits:
        return None
    if difference and not _computed_before(nums[0], context):
        return None  # "Jane has 3 more apples than Bob" with no working: a restated comparison, not a computed difference
    at = s.find(nums[0])
    return None if _VALUE_WORD.match(s, at + len(nums[0])) else nums[0]


# "If they share the stickers equally, each friend gets 6": a leading condition that restates the question (no
# digit, no math, no negation), set off by a comma; the value comes after it ("6 if n is odd" qualifies 6: kept)
_RESTATED_CONDITION = re.compile(
    r"(?:if|when|since|because|assuming|given\s{1,3}that|after|once)\s[^,\d$\\]{1,120}?,\s{0,3}", re.I
)


def answer_sentence_value(s: str, context: str = "") -> str | None:
    """The one number an answer sentence states (``each friend gets 6``), reading past a leading restated
    condition (``If they share equally, each friend gets 6``); None when ``_sole_number`` finds none.

    Only for the content of an explicit answer marker (an answer line or an ``<answer>`` tag), never for
    free prose: the marker already says this sentence is the answer. ``context``: the text before the marker.
    """
    s = s.strip()
    m = _RESTATED_CONDITION.match(s)
    # the condition holds no negation and no variable (a lone letter: "If n is odd, 6" is one case of a case split)
    if (
        m
        and not re.search(r"\b(?:not|no|never|only)\b|\b(?![aAI]\b)[A-Za-z]\b", s[: m.end()])
        and not _PROSE_STOP.search(s[m.end() :])
    ):
        return _sole_number(s[m.end() :], context)
    return _sole_number(s, context)


# display math ($$ $$, \\[ \\]) may span lines; inline math ($ $, \\( \\)) may not, as in LaTeX's own reading
_SPAN = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$([^\n$]+?)(?:(?<!\\)\$|$)|\\\(([^\n]+?)\\\)|\\\[(.+?)\\\]", re.S)
_PROSE_STOP = re.compile(
    r"\b(?:not|no|never|isn'?t|wasn'?t|aren'?t|cannot|can'?t|won'?t|doesn'?t|don'?t|didn'?t|impossible|except|without|or|nor|neither|either|maybe|perhaps|possibly|"
    r"probably|might|could|guess|wrong|incorrect|false|unsure|approximately|about|almost|nearly|if|unless|but)\b|\?",
    re.I,
)


def _sole_math_span(s: str) -> str | None:
    """The one math span of a prose answer (``We find that $x < 3$.``), or None.

    Only when the prose around the span holds no digit and no negation, hedge or condition word
    (``it is not $5$``, ``maybe $5$``, ``$5$ if n is odd`` keep their prose and fail to parse).
    """
    if len(s) > MAX_PROSE_CHARS or "$" not in s and "\\" not in s:
        return None
    spans = list(_SPAN.finditer(s))
    if len(spans) != 1:
        return None
    outside = s[: spans[0].start()] + " " + s[spans[0].end() :]
    if not re.search(r"[A-Za-z]{2,}", outside) or re.search(r"\d", outside) or _PROSE_STOP.search(outside):
        return None
    return next(g for g in spans[0].groups() if g is not None).strip()


_SETUP = re.compile(
    r"\b(?:let|suppose|assume|consider|denote|define|given|try|trying|check|test|substitute|plug)\b",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?。](?=\s)")


_CLOSING = re.compile(r"\s{0,8}I\s{1,3}hope\s{1,3}it\s{1,3}is\s{1,3}correct\s{0,3}[.!]?\s{0,8}$", re.I)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|finally|consequently|in\s{1,3}conclusion|in\s{1,3}total|altogether|overall)\b", re.I
)
_VERB = re.compile(r"\s(?:is|are|was|were|equals|=)(?=\s)")
_LAST_VERB = re.compile(r".*\s(?:is|are|was|were|equals|=)\s", re.S)  # only on one bounded sentence
_PLAIN_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:\s{0,3}/\s{0,3}\d+)?\\?%?")


MAX_UNMARKED_CHARS = 4000  # a longer completion with no answer marker is more likely cut off than finished
_ONLY_SPAN = re.compile(
    r"\s{0,8}(?:\$\$[^$]{1,2000}\$\$|\$[^$\n]{1,2000}\$|\\\[.{1,2000}?\\\]|\\\(.{1,2000}?\\\))[\s.]{0,8}", re.S
)
# a sentence after the conclusion that explains it ("This is the number of eggs sold each week."): no value, no
# doubt, no setup, no question
_DOUBT_WORDS = re.compile(
    r"\b(?:wait|hmm|actually|re-?check|reconsider|verify|check|mistake|error|however|but|wrong|though)\b", re.I
)


# a closing check of the conclusion ("Check: 45 - 15 = 30.", "To verify, ..."): its opener starts a line
_VERIFICATION = re.compile(
    r"(?im)^[ \t#*]{0,8}(?:verification|verify(?:ing)?|check(?:ing)?|double[- ]check|to\s{1,3}(?:check|verify)|"
    r"let'?s\s{1,3}(?:check|verify))\b[ \t*]{0,3}[:,]?"
)


def _final_sentence(text: str) -> str | None:
    """The value the completion's last sentence states (``_closing_value``), or the value of the conclusion before a
    closing check of it (``So she has 45 books.`` then ``Check: 45 - 15 = 30.``): at most three lines at the end,
    opened by a verification word, with no word of doubt, negation or condition, that name the value again; None
    otherwise."""
    value = _closing_value(text)
    if value is not None:
        return value
    tail_at = max(0, len(text) - MAX_PROSE_CHARS)
    check = _VERIFICATION.search(text, tail_at)
    if check is None or check.start() == 0:
        return None
    block = text[check.end() :]
    if len(_LINE_BREAK.findall(block.strip())) > 2 or _DOUBT_WORDS.search(block) or _PROSE_STOP.search(block):
        return None
    value = _closing_value(text[: check.start()])
    named = value is not None and re.search(r"(?<![\d.,])" + re.escape(value.replace(",", "")) + r"(?![\d,]*\d)", block)
    return value if named else None


def _closing_value(text: str) -> str | None:
    """The value the completion's last sentence states, or None (a lone ``$`` before a digit on the last line is a
    currency sign, ``Janet paid $1430 for the brooch.``, never an unclosed math span).

    Only the last sentence of the last line is read (at most ``MAX_PROSE_CHARS`` characters; a
    closing ``I hope it is correct.`` is dropped), in these cases: it holds exactly one math span and
    prose without digits or negation, hedge or condition words (``We find that $x < 3$.``,
    ``_sole_math_span``); or it opens with a conclusion word (``Therefore``, ``Thus``, ``So``, ...),
    ends with a full stop and states one value (``_stated_value``); or (math-1.4.0, completions up to
    ``MAX_UNMARKED_CHARS``) it is a closing computation line (``_final_chain``: ``Therefore a + b = 3 + 4 =
    7.``) or a finished sentence that restates, as its one number, a value the text computed before it
    (``... 5 * 9 = 45 liters.`` then ``The tank holds 45 liters.``). One explanatory
    sentence after the conclusion (no digit, no math, no doubt or setup word) is passed over. A completion
    that is one math span is that span (``$2^3 = 2 \\cdot 2 \\cdot 2 = 8$``: a chain states its last link).
    A sentence that sets something up (``Let $n = 5$.``) is no answer.
    """
    cut = max(text.rfind(c) for c in _BREAK_CHARS) + 1
    if text.count("$", cut) == 1 and re.search(r"(?<!\\)\$\d", text[cut:]):
        text = text[:cut] + re.sub(r"(?<!\\)\$(?=\d)", "", text[cut:])
    whole = _ONLY_SPAN.fullmatch(text)
    if whole is not None:  # the completion is one equality chain / one formula
        span = _SPAN.search(text)
        return next(g for g in span.groups() if g is not None).strip() if span else None
    value = _last_sentence_value(text) or _stated_choice(text)
    if value is not None or len(text) > MAX_UNMARKED_CHARS:
        return value  # a longer unmarked text may be reasoning cut off at a sentence end: only the rules above
    value = _final_chain(text)
    if value is not None:
        return value
    cut = _comment_cut(text)
    if cut is not None:  # "So the farmer sells 120 eggs in total. This is the number of eggs sold each week."
        value = _last_sentence_value(cut)
        if value is not None:
            return value
    return _restated_value(cut if cut is not None else text)


_CHAIN_CONTEXT = re.compile(
    r"\b(?:therefore|thus|hence|so|finally|consequently|sum|total|result|altogether|overall|in\s{1,3}all)\b", re.I
)
_COMPUTED_LINK = re.compile(_COMPUTED)
_TIMES_X = re.compile(r"(?<=\d)\s{1,3}[xX]\s{1,3}(?=\d)")
_UNIT_WORDS = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?)(?:\s{1,3}[A-Za-z]{2,20}){1,3}")
_PLAIN = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_LABEL_LEAD = re.compile(r".{0,80}[:：]\s{0,3}")  # "Sum of all such bases: 21 + 49"


def _final_chain(text: str) -> str | None:
    """The value of a closing line that computes it: ``Therefore a + b + c = 3 + 57 + 2 = 62.``,
    ``Sum of all such bases: 21 + 49 = 70.``, or such a line after a line ending ``Therefore`` / ``so``.

    The last line (bounded, ``MAX_PROSE_CHARS``; ending with a full stop), without math delimiters, must be a
    chain whose last link is one plain number and whose link before it is arithmetic on numbers only
    (``_COMPUTED``), in a conclusion context: a conclusion or total word (``_CHAIN_CONTEXT``) in that line or
    ending the line before it. Only read in a completion of at most ``MAX_UNMARKED_CHARS``. None otherwise.
    """
    lines = [ln.strip() for ln in _LINE_BREAK.split(text.rstrip()[-2 * MAX_PROSE_CHARS :]) if ln.strip()]
    if not lines or len(lines[-1]) > MAX_PROSE_CHARS:
        return None
    line = _UNICODE_OPS.sub(lambda m: _OPS[m.group()], lines[-1].replace("$", "").replace("\\(", "").replace("\\)", ""))
    line = _TIMES_X.sub(" * ", line)  # "1000 x 3 x 31": x between numbers multiplies
    links = line.rstrip(" .。").split("=")
    if len(links) < 2 or len(links) > 8:
        return None
    last, before = links[-1].strip(), links[-2].strip()
    unit = _UNIT_WORDS.fullmatch(last)  # "= 27 fruits": a number then its unit is a finished link
    if unit and not _VALUE_WORD.match(last, unit.end(1)) and not _PROSE_STOP.search(last):
        last = unit.group(1)
    elif not line.rstrip().endswith((".", "。")):
        return None  # "Therefore a + b = 3 + 4 = 7" with no full stop may be cut off ("= 7 \\cdot 2 = 14")
    line = line.rstrip(" .。")
    lead = _LABEL_LEAD.match(before) if len(links) == 2 else None
    if lead:
        before = before[lead.end() :]
    if not _PLAIN.fullmatch(last) or not _COMPUTED_LINK.fullmatch(before):
        return None
    opener = _CHAIN_CONTEXT.search(line) or (
        len(lines) > 1 and re.search(r"(?:^|\W)(?:therefore|thus|hence|so|finally)[\s,:]*$", lines[-2], re.I)
    )
    if not opener or _PROSE_STOP.search(line) or _HEDGE.search(line) or _SETUP.search(line):
        return None
    return last


class _Tail(NamedTuple):
    sentence: str  # the last sentence (sentence ends inside math spans do not count)
    line: str  # the line it is on
    several_lines: bool  # whether the bounded end holds a line break
    whole_line: bool  # whether the sentence starts its line (no sentence end before it)


def _last_sentence(text: str) -> _Tail:
    """The last sentence of ``text``'s bounded end (``MAX_PROSE_CHARS``), its line, and where it stands."""
    tail = _CLOSING.sub("", text.rstrip()[-MAX_PROSE_CHARS - 40 :])[-MAX_PROSE_CHARS:]
    breaks = list(_LINE_BREAK.finditer(tail))
    line = tail[breaks[-1].end() :] if breaks else tail
    spans = [(m.start(), m.end()) for m in _SPAN.finditer(line)]
    start = 0
    for m in _SENTENCE_END.finditer(line):  # sentence ends outside math spans
        if not any(a <= m.start() < b for a, b in spans):
            start = m.end()
    return _Tail(line[start:].strip(), line, bool(breaks), start == 0)


def _comment_cut(text: str) -> str | None:
    """``text`` without its last sentence when that sentence is a comment on the conclusion, else None."""
    sentence = _last_sentence(text).sentence
    if not sentence or len(sentence) > 160 or not sentence.endswith((".", "!", "。")) or re.search(r"[\d$\\]", sentence):
        return None
    if _PROSE_STOP.search(sentence) or _HEDGE.search(sentence) or _SETUP.search(sentence) or _DOUBT_WORDS.search(sentence):
        return None
    body = _CLOSING.sub("", text.rstrip())
    at = body.rfind(sentence)
    return body[:at] if at > 0 else None


def _restated_value(text: str) -> str | None:
    """The one number of a finished last sentence that restates a value computed before it, or None.

    ``The tank holds 45 liters.`` after ``5 * 9 = 45`` (or ``<<5*9=45>>``, ``is 45``): the number must
    appear earlier as the result of a computation or statement, so a sentence that merely mentions a
    number of the question (``She buys 3 apples.``) is no answer; never with a setup, negation, hedge,
    condition or comparison word (``_sole_number``).
    """
    sentence, line, _, _ = _last_sentence(text)
    if not line.rstrip().endswith((".", "!", "。")) or _SETUP.search(sentence):
        return None
    body = text.rstrip()
    before = body[: max(0, body.rfind(sentence))]
    value = _sole_number(sentence.rstrip(" .!。"), before)
    return value if value is not None and _computed_before(value, before) else None


def _last_sentence_value(text: str) -> str | None:
    """The pre-1.4 rules of ``_final_sentence``: one math span, or a finished conclusion sentence."""
    sentence, line, several_lines, whole_line = _last_sentence(text)
    conclusion = None
    for conclusion in _CONCLUSION.finditer(sentence):  # noqa: B007 (the last conclusion word opens the statement)
        pass
    if not several_lines and len(text.rstrip()) > MAX_PROSE_CHARS and whole_line:
        if conclusion is None:
            return None  # the last sentence is longer than a stated answer
        sentence = sentence[conclusion.start() :]
    if conclusion is None and _SETUP.search(sentence):  # "Let $n = 5$.": a setup cut off, not a conclusion
        return None
    span = _sole_math_span(sentence)
    if span is not None or conclusion is None or not line.rstrip().endswith((".", "!", "。")):
        return span  # a conclusion is read only as a finished sentence ("so we get 5" may be cut off)
    for opener in reversed(
        list(_CONCLUSION.finditer(sentence))[-4:]
    ):  # "So ... 120 eggs in total.": the last word that opens a value
        value = _stated_value(sentence[opener.start() :])
        if value is not None:
            return value
    return None


def _stated_value(s: str) -> str | None:
    """``Therefore, the probability that Alice wins is 2/3.`` -> ``2/3``; ``..., the pair is $(7, 6)$.`` -> ``(7, 6)``.

    The value after the sentence's last "is"/"are"/"equals" when it is one math span or one plain
    number, else the sentence's one number (``_sole_number``); None when the sentence outside its math
    holds a negation, hedge, condition or comparison word, or when a value is stated between its first
    and its last verb (``Thus x is 12 and y is 5``: two statements, not one value).
    """
    s = s.rstrip(" .!。")
    outside = _SPAN.sub(" ", s)
    if _PROSE_STOP.search(outside) or _COMPARATIVE.search(outside) or _HEDGE.search(outside):
        return None
    m = _LAST_VERB.match(s)
    first = _VERB.search(s, 0, m.end()) if m else None
    if m and first is not None and re.search(r"\d", s[first.end() : m.end()]):
        return None  # "Thus x is 12 and y is 5": a value stated before the last one, two statements
    if m:
        rest = s[m.end() :].strip()
        spans = list(_SPAN.finditer(rest))
        if len(spans) == 1 and spans[0].start() == 0 and spans[0].end() == len(rest):
            return next(g for g in spans[0].groups() if g is not None).strip()
        if _PLAIN_NUMBER.fullmatch(rest):
            return rest
    return _sole_number(s)


_CHOICE_STATED = re.compile(r".{0,200}\s(?:is|are|was|were)\s{1,3}(\([A-J]\)(?:\s{1,3}\S.{0,60})?)", re.S)


def _stated_choice(text: str) -> str | None:
    """``The ratio of XY to XZ is (B) 2/3.`` -> ``(B) 2/3``: a finished last sentence whose predicate is a
    parenthesised choice letter, alone or with its option's text; never with a negation, hedge or setup word."""
    sentence, line, _, _ = _last_sentence(text)
    if not line.rstrip().endswith((".", "!", "。")):
        return None
    s = sentence.rstrip(" .!。")
    m = _CHOICE_STATED.fullmatch(s)
    if m is None or _PROSE_STOP.search(s) or _HEDGE.search(s) or _SETUP.search(s):
        return None
    return m.group(1)
