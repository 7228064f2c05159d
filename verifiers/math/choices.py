"""Multiple-choice answers: which option a completion picks, when the gold is a choice letter or the task lists options.

A task record may carry its ``choices`` (the option texts, in letter order ``A``, ``B``, ...). With them, a
letter and its option's value are one answer: ``(C)``, ``C (12)``, ``\\boxed{12}`` then ``The answer is (C).``
all pick C when C's option is 12; a letter written with another option's value (``C (7)`` when C is 12) or another
option's value beside the letter is a rival pair (``ambiguous``). Without them a letter gold is decided by the
final letter: a value stated before one letter (``\\boxed{72}`` then ``The answer is (C).``) cannot be checked
against the options and is passed over; a value stated after the last letter, or several different letters, are
no letter answer. With them a value that no option is known to equal (another notation, ``7 over 24``, or a value
off the list) is passed over the same way; only a value that equals another option is a rival.

Pure functions on extracted candidates (``extract``) and parsed answers (``parse``); exact comparisons only
(``compare.leaf_equal`` without sympy: a pair that needs sympy is undecided, never equal).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ratchet.verifiers.math.comparison.compare import NeedsCAS, leaf_equal
from ratchet.verifiers.math.extraction.extract import Extraction
from ratchet.verifiers.math.extraction.prose import _HEDGE
from ratchet.verifiers.math.parsing.parse import Answer, ParseError, parse_answer

LETTERS = "ABCDEFGHIJ"
MAX_CHOICES = len(LETTERS)  # options past J have no letter a prediction could name
_RIVAL = "rival"  # a letter written with another option's value, or a value several options share


def _parsed(text: str) -> Answer | None:
    try:
        return parse_answer(text)
    except ParseError:
        return None


def _equal(a: Answer, b: Answer) -> bool | None:
    """Exact equality of two answers; None when it needs sympy (undecided)."""
    try:
        return leaf_equal(a, b, None)
    except NeedsCAS:
        return None


_LETTER_LEAD = re.compile(
    r"\s{0,3}(?:\(\s{0,3}([A-J])\s{0,3}\)|([A-J])\s{0,3}[).:])\s{0,3}[:.]?\s{0,3}(.{1,300}?)[\s.]{0,3}", re.S
)


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("$", "")).strip(" .").lower()


def _letter_with_its_text(candidate: str, choices: Sequence[str] | None) -> str | None:
    """The letter of ``(A) <option A's text>`` written out word for word (an option may hold "not", "or", "and"
    that would make other text no choice: ``(D) I and II only``); None otherwise."""
    m = _LETTER_LEAD.fullmatch(candidate) if choices is not None else None
    if m is None:
        return None
    letter = m.group(1) or m.group(2)
    i = LETTERS.index(letter)
    return letter if i < len(choices) and _words(m.group(3)) == _words(choices[i]) else None  # type: ignore[arg-type]


def _letter_of(candidate: str, options: Sequence[Answer | None] | None, choices: Sequence[str] | None = None) -> str | None:
    """The letter a candidate picks: its own letter (checked against its option's value when both are given), or
    with ``options`` the one option whose value it equals; ``_RIVAL`` for a disagreeing pair or a shared value;
    None for a value that picks no letter (no option is known to equal it: another notation, or none)."""
    p = _parsed(candidate)
    if p is None:
        return None
    if p.kind == "choice":
        letter = str(p.value)
        i = LETTERS.index(letter)
        opt = options[i] if options is not None and i < len(options) else None
        if p.content is not None and opt is not None and "text" not in (p.content.kind, opt.kind):
            if _equal(opt, p.content) is False:
                return _RIVAL  # "C (7)" when option C is 12: the letter and the value name two options
        return letter
    if options is None:
        return None
    texts = [LETTERS[i] for i, c in enumerate(choices or ()) if _words(c) == _words(candidate)]
    if len(texts) == 1:
        return texts[0]  # written as one option is: that option, whatever other options equal as numbers
    hits = [LETTERS[i] for i, opt in enumerate(options) if opt is not None and _equal(opt, p)]
    return hits[0] if len(hits) == 1 else (_RIVAL if hits else None)


def _final_is_letter(candidates: Sequence[str], picked: Sequence[str | None], completion: str) -> bool:
    """Whether the last candidate the completion states (by where each is last written) is a letter."""
    last = [completion.rfind(c) for c in candidates]
    if min(last) < 0:
        return False  # a candidate not found verbatim: where it stands is unknown
    return picked[last.index(max(last))] is not None


def _gold_letter(gold: Answer, gold_text: str, choices: Sequence[str], options: Sequence[Answer | None]) -> str | None:
    """The option a gold names: its letter, the one option written as the gold is (``6cm``), else the one option
    equal to it; None when no option or several options equal it (ranges ``0.0 - 0.2``, ``0.4 - 0.6`` are one number
    each as arithmetic: the text decides, never the value)."""
    if gold.kind == "choice":
        return str(gold.value)
    texts = [LETTERS[i] for i, c in enumerate(choices) if _words(c) == _words(gold_text)]
    if len(texts) == 1:
        return texts[0]
    hits = [LETTERS[i] for i, opt in enumerate(options) if opt is not None and _equal(opt, gold)]
    return hits[0] if len(hits) == 1 else None


def pick(
    gold: Answer, ex: Extraction, choices: Sequence[str] | None, completion: str = "", gold_text: str = ""
) -> tuple[str, str] | None:
    """What a completion answers when the gold is a letter or the task lists its options.

    Args:
        gold: the parsed gold answer.
        ex: the completion's extraction (``ok`` with one candidate, or ``ambiguous`` between several).
        choices: the task's option texts in letter order, or None.
        completion: the completion's text: without ``choices`` the final letter decides only when no value is
            stated after it (``The answer is (G).`` then ``... should be closer to -0.6886`` is no letter answer).
        gold_text: the gold as written (a value gold names its option by its text).

    Returns:
        ``("pred", text)`` -- the text to compare with the gold in place of the extraction's (``(C)``, or the gold
        itself when the picked option is the gold's); ``("wrong", letter)`` -- another option than the gold's;
        ``("ambiguous", why)`` -- a rival pair or several letters; None -- the extraction stands as it is.
    """
    if choices is not None and not 1 < len(choices) <= MAX_CHOICES:
        return None  # not a multiple-choice task (or more options than letters): read as if no options were given
    if gold.kind != "choice" and choices is None:
        return None
    if ex.status == "ok" and ex.text is not None and choices is not None:
        candidates: tuple[str, ...] = (ex.text,)
    elif ex.status == "ambiguous" and not ex.problem and len(ex.candidates) > 1:
        candidates = ex.candidates  # several answers: decided by the letters (and options) among them
    else:
        return None
    if any(_HEDGE.search(c) for c in candidates):
        return None
    options = [_parsed(c) for c in choices] if choices is not None else None
    target = _gold_letter(gold, gold_text, choices, options) if choices is not None and options is not None else None
    picked = [_letter_with_its_text(c, choices) or _letter_of(c, options, choices) for c in candidates]
    if _RIVAL in picked:
        return ("ambiguous", "a letter and an option's value that name different options")
    if gold.kind != "choice" and target is None:
        return None  # a value gold no single option names: compared as a value, as if no options were given
    letters = dict.fromkeys(p for p in picked if p is not None)
    if len(letters) > 1:
        return ("ambiguous", "several options are named")
    if not letters:
        return None
    if None in picked and not _final_is_letter(candidates, picked, completion):
        return None  # a value stated after the last letter (or that no option is known to equal): no letter answer
    letter = next(iter(letters))
    if gold.kind == "choice":
        return ("pred", f"({letter})")
    return ("pred", gold_text) if letter == target else ("wrong", letter)
