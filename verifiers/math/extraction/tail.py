"""What a completion writes after its final answer: a retraction, a dangling answer label, a question.

Used by ``math_extract``: the last explicit final answer wins, so text after it can only take the
credit away, never move it to an earlier answer. Pure string work in linear time (one scan of the
tail with patterns whose whitespace runs are bounded; the dangling-label check reads a bounded end).

Red-team classes (``tests/verifiers/math/test_redteam.py``):
    * **retracted**: ``\\boxed{5}`` followed by a self-correction (``Wait, ...``, ``Actually the answer
      should be 6``, ``Hmm, that's wrong``, ``I made an error``, ``Let me recheck``, ``No, it's 6``;
      not "mistake" or "wrong" alone, which also explain right answers), or a contrast in the answer's own sentence (``\\boxed{5}, but that
      ignores the constraint``) -> ``ambiguous`` (the model took
      the answer back; crediting it rewards answering early and rambling on). A later answer phrase
      after the last retraction word (``Wait, ... Yes, the answer is 5.``) is read as a rival answer
      instead: it must agree with the final answer.
    * **dangling**: ``\\boxed{5}`` followed by a final-answer label with nothing after it
      (``Final Answer:``, ``So the answer is``, ``**Final Answer**``, ``The final answer is $``): the
      generation was cut off while writing its final answer -> ``no_answer`` (as a truncated box).
    * **question**: a final answer followed by ``?`` (``Could the answer be $\\boxed{5}$?``) is a hedge.
    * **not retractions** (math-1.4.0): a check that confirms the answer (``However, to be sure, let us check:
      3 * 7 = 21, which confirms the answer.``: a verification opener after the contrast word, a confirmation
      word, and no word of doubt such as ``not``, ``wrong``, ``but``, ``instead``) and affirmations (``This
      answer is correct.``, never read as a rival answer: ``lines._AFFIRMATION``) leave the verdict as it is.
"""

from __future__ import annotations

import re

TAIL_END_CHARS = 120  # a dangling label is looked for in this many characters at the end

# self-corrections only: "mistake", "wrong" or "actually" alone also explain a right answer ("the
# common mistake is 6", "6 would be wrong", "Actually, we can also see this directly")
_RETRACTION = re.compile(
    r"\b(?:wait|oops|redo|re-do|disregard|scratch\s{1,3}that|correction\s{0,3}:)\b"
    r"|\b(?:i|we)\s{1,3}(?:made|make|have\s{1,3}made)\s{1,3}(?:an?\s{1,3})?(?:mistake|error|miscalculation|typo)"
    r"|\b(?:that|this|it|which|above|answer|result)(?:'s|\s{1,3}(?:is|was))\s{1,3}(?:not\s{1,3}(?:right|correct)|wrong|incorrect)"
    r"|\bactually\s{0,3},?\s{0,3}(?:no\b|the\s{1,3}(?:correct\s{1,3}|final\s{1,3}|right\s{1,3})?answer|it\s{1,3}(?:is|should))"
    r"|\blet\s{1,3}me\s{1,3}(?:re-?check|reconsider|re-?calculate|re-?compute|re-?examine|re-?do|correct)"
    r"|\bno\s{0,3}[,.!]?\s{0,3}(?:wait|it'?s|it\s{1,3}is|the\s{1,3}answer)\b"
    r"|等等[，,]|等一下|不对(?!称)|算错|错了|搞错|重新(?:计算|检查|考虑)",  # Chinese: wait, wrong, miscalculated, redo
    re.I,
)
_DANGLING = re.compile(
    r"(?:answer\s{1,3}(?:is|would\s{1,3}be|will\s{1,3}be|should\s{1,3}be)|answer[\s*_]{0,6}[:：=]|^[\s*_#]{0,8}final\s{1,3}answer|####)"
    r"[\s*_#]{0,8}[:：=]?[\s*_]{0,8}(?:\$\$?|\\\(|\\\[)?\s{0,8}\Z",
    re.I | re.M,
)
# a sentence that sets an answer up instead of stating it: "Suppose the answer is 5", "check whether the answer is 5"
HYPOTHETICAL = re.compile(
    r"\b(?:suppose|supposing|assume|assuming|if|whether|say|guess|try|trying|test|testing)\s{1,3}(?:that\s{1,3})?"
    r"(?:the\s{1,3}|our\s{1,3}|my\s{1,3})?(?:final\s{1,3}|correct\s{1,3})?\Z",
    re.I,
)
# "It is tempting to answer \\boxed{5}, but that ignores ...": a contrast in the answer's own sentence
# or opening the next sentence ("\\boxed{5}\n\nHowever, n = 0 also works")
_CONTRAST = re.compile(r"(?:[^.!?\n]{0,40}?|[\s.!?$)\]\\}]{0,12})\b(?:but|however|though|although|except)\b", re.I)
_QUESTION = re.compile(r"[\s$)\]\\]{0,8}\?")
# "However, to be sure, let us check: 3 * 7 = 21, which confirms the answer.": a check of the answer, not a contrast
_VERIFY = re.compile(
    r"[\s,;:]{0,4}(?:to\s{1,3}be\s{1,3}(?:sure|safe|certain|thorough)|to\s{1,3}(?:verify|check|confirm|double[-\s]check)"
    r"|let(?:'s|\s{1,3}us|\s{1,3}me)\s{1,3}(?:verify|check|double[-\s]check|confirm)"
    r"|we\s{1,3}(?:can|should|may)\s{1,3}(?:verify|check|double[-\s]check|confirm))\b",
    re.I,
)
_CONFIRMS = re.compile(
    r"\b(?:confirms?|confirmed|confirming|checks\s{1,3}out|verified|verifies|is\s{1,3}(?:correct|right|consistent))\b", re.I
)
_DOUBT = re.compile(
    r"\b(?:not|no|never|incorrect|wrong|contradict\w*|mistake|error|inconsistent|doesn'?t|isn'?t|fails?|but|instead|rather)\b|\?",
    re.I,
)


def _confirming_check(tail: str, at: int) -> bool:
    """Whether ``tail[at:]`` (after "However") checks the answer and confirms it, with no word of doubt."""
    return bool(_VERIFY.match(tail, at)) and bool(_CONFIRMS.search(tail, at)) and not _DOUBT.search(tail, at)


def has_retraction(text: str) -> bool:
    """Whether ``text`` holds a self-correction word (``_RETRACTION``: ``Wait``, ``that's wrong``, ...); linear time."""
    return _RETRACTION.search(text) is not None


def tail_problem(tail: str) -> tuple[str, int]:
    """Why the text after a final answer takes its credit away: ``(problem, offset)``.

    ``problem`` is ``"retracted"`` (offset: just after the last retraction word), ``"dangling"``
    (a final-answer label with no value at the very end), ``"question"`` (the answer is asked, not
    stated) or ``""`` (the tail is harmless; offset 0).
    """
    if _QUESTION.match(tail):
        return "question", 0
    if _DANGLING.search(tail[-TAIL_END_CHARS:]):
        return "dangling", len(tail)
    contrast = _CONTRAST.match(tail)
    if contrast is not None and _confirming_check(tail, contrast.end()):
        contrast = None  # "However, to be sure, let us check: ... which confirms the answer": a verification
    last = None
    for last in _RETRACTION.finditer(tail, contrast.end() if contrast else 0):  # noqa: B007 (a phrase after the last retraction may restate the answer)
        pass
    if last is not None or contrast is not None:
        return "retracted", last.end() if last is not None else contrast.end()  # type: ignore[union-attr]
    return "", 0
