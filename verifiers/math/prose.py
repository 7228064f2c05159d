"""Prose around a final answer: the one math span of a sentence, the one number of a prose final-answer
sentence, the last sentence of a completion, and the hedge words that make any of them ``ambiguous``.

Used by ``math_extract``; pure string work in linear time (every pattern is applied to a text already
cut to ``MAX_PROSE_CHARS`` or scanned once with bounded quantifiers).
"""

from __future__ import annotations

import re

MAX_PROSE_CHARS = 300  # a prose final answer longer than this is an explanation, not an answer

_HEDGE = re.compile(
    r"(?i)\b(?:one\s+of|either|maybe|perhaps|possibly|probably|might\s+be|could\s+be|not\s+sure|or\s+maybe|i\s+think|guess)\b|\?\s{0,8}$"
)
_LINE_BREAK = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # what str.splitlines splits on


_COMPARATIVE = re.compile(
    r"\b(?:less|more|fewer|greater|smaller|larger|than|times|twice|half|double|triple|negative|minus|plus|per\s+cent|"
    r"least|most|up\s+to|below|above|under|over|between)\b",
    re.I,
)
_NUMBER_TOKEN = re.compile(
    r"(?<![\w.,])[-−]?\d{1,3}(?:,\d{3})*(?:\.\d+)?(?![\w.,]*\d)(?![A-Za-z])|(?<![\w.,])[-−]?\d+(?:\.\d+)?(?![\w.,]*\d)(?![A-Za-z])"
)


def _sole_number(s: str) -> str | None:
    """The one number of a prose final-answer sentence (``Jane started growing it 3 hours ago``), or None.

    Only for a short sentence with no math, exactly one number (not an ordinal such as ``3rd``) and no
    negation, hedge, condition or comparison word (``not 3``, ``3 more than``, ``maybe 3``).
    """
    if len(s) > MAX_PROSE_CHARS or "$" in s or "\\" in s or not re.search(r"[A-Za-z]{2,}", s):
        return None
    if sum(c.isdigit() for c in s) == 0 or _PROSE_STOP.search(s) or _COMPARATIVE.search(s) or _HEDGE.search(s):
        return None
    nums = _NUMBER_TOKEN.findall(s)
    if len(nums) != 1 or sum(c.isdigit() for c in nums[0]) != sum(c.isdigit() for c in s):
        return None
    return nums[0]


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


def _final_sentence(text: str) -> str | None:
    """The value the completion's last sentence states, or None.

    Only the last sentence of the last line is read (at most ``MAX_PROSE_CHARS`` characters; a
    closing ``I hope it is correct.`` is dropped), in two cases: it holds exactly one math span and
    prose without digits or negation, hedge or condition words (``We find that $x < 3$.``,
    ``_sole_math_span``); or it opens with a conclusion word (``Therefore``, ``Thus``, ``So``, ...),
    ends with a full stop and states one value (``_stated_value``). A sentence that sets something up (``Let $n = 5$.``) is no answer.
    """
    tail = _CLOSING.sub("", text.rstrip()[-MAX_PROSE_CHARS - 40 :])[-MAX_PROSE_CHARS:]
    breaks = list(_LINE_BREAK.finditer(tail))
    line = tail[breaks[-1].end() :] if breaks else tail
    spans = [(m.start(), m.end()) for m in _SPAN.finditer(line)]
    start = 0
    for m in _SENTENCE_END.finditer(line):  # sentence ends outside math spans
        if not any(a <= m.start() < b for a, b in spans):
            start = m.end()
    sentence = line[start:].strip()
    conclusion = None
    for conclusion in _CONCLUSION.finditer(sentence):  # noqa: B007 (the last conclusion word opens the statement)
        pass
    if not breaks and len(text.rstrip()) > MAX_PROSE_CHARS and start == 0:
        if conclusion is None:
            return None  # the last sentence is longer than a stated answer
        sentence = sentence[conclusion.start() :]
    if conclusion is None and _SETUP.search(sentence):  # "Let $n = 5$.": a setup cut off, not a conclusion
        return None
    span = _sole_math_span(sentence)
    if span is not None or conclusion is None or not line.rstrip().endswith((".", "!", "。")):
        return span  # a conclusion is read only as a finished sentence ("so we get 5" may be cut off)
    return _stated_value(sentence[conclusion.start() :] if conclusion.start() < len(sentence) else sentence)


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
