"""Math answer verification, the entry points: ``verify_math`` / ``verify_math_batch`` (extract -> parse -> compare).

Two stages like Math-Verify: ``extract_answer``/``parse_answer`` (``ratchet.verifiers.math.parsing.parse``) and a
comparison (``ratchet.verifiers.math.comparison.compare``). Integers, rationals, decimals, percents, choices, text,
and sets/tuples/intervals of those are compared exactly in the caller's process; only pairs that
involve a real expression (``\\sqrt{2}``, ``2\\pi``, ``x^2+1``) go to sympy, in worker processes
that are SIGKILLed at ``timeout_s`` (never ``signal.alarm``, never ``eval``/``exec`` of model text).

Policy (a change to any of these bumps ``VERSION``):
    * **Answer formats** (math-1.4.0, ``answer_format`` on ``verify_math``, ``verifier.answer_format`` and each
      ``[[tasks.sources]]``; recorded as ``details["answer_format"]``): ``"auto"`` (default) reads every marker in
      the precedence below and refuses disagreeing ones (``ambiguous``); ``"boxed"``, ``"answer_line"``
      (``Answer:``/``A:`` lines and headings), ``"json"`` (an ``"answer"`` field) or ``"gsm8k"`` (``#### X``)
      read only that marker, so a task that asks for one format is not read through another (the other markers
      are working, never rivals); a declared marker that is absent is ``no_answer``.
    * **Extraction** (``math_extract``, linear time on any text): answer tag > JSON ``"answer"`` field (a box
      outside it that disagrees is ``ambiguous``; two different fields are) > last ``\\boxed{}`` >
      ``Answer:`` line > last "the answer is X"; never from ``<think>``/``<thinking>``/``<reasoning>``
      or OpenThoughts' ``<|begin_of_thought|>`` blocks (tag spacing and case ignored); the completion
      ends at its first end-of-turn token (``<|im_end|>``, ``<|im_start|>``, ``<|endoftext|>``), and at the
      first line that opens an invented next exercise (``Q:``, ``Question:``, ``Problem:``) after an answer
      marker: a base model's continuation answers a question it made up and is never graded. A closing ``A: N``
      line (the Q:/A: few-shot format of early GSM8K releases) is an answer line, unless ``B:`` ... lines list
      options; "the answer (in dollars) is 18" is an answer phrase.
      **The last explicit final answer wins**: an answer line after the last box is the answer (the
      boxes before it were working: ``\\boxed{200} ... \\boxed{255} ... Final Answer: 10455``), and
      answer lines before the last box were working; one value is graded, so writing several never
      pays. Several different boxes, several different answer lines after the last box, a box
      outside the answer tag that disagrees with it, or hedge words -> ``ambiguous``. With no marker
      at all, the completion's last sentence is read when it states exactly one math span with
      prose free of digits and of negation, hedge or condition words (``We find that $x < 3$.``;
      never ``It is not $5$``, ``maybe $5$``, ``$5$ if n is odd``), or when it is a finished
      sentence opened by a conclusion word that states one value (``Therefore, the probability
      is 2/3.``, ``So, the pair $(x, y)$ that solves it is $(7, 6)$.``; a closing ``I hope it is
      correct.`` is dropped; never with a negation, hedge, condition or comparison word, never
      ``Let $n = 5$.``, never an unfinished ``so we get 5``). Also (math-1.4.0): a completion that is one math
      span (``$2^3 = 2 \\cdot 2 \\cdot 2 = 8$``: its chain's last link); and, in a completion of at most
      ``math_prose.MAX_UNMARKED_CHARS`` (a longer unmarked text may be reasoning cut off at a sentence end), a
      finished closing line that computes the value in a conclusion context (``Therefore a + b + c = 3 + 57 + 2
      = 62.``, ``Sum of all such bases: 21 + 49 = 70.``: the link before the value is arithmetic on numbers), or a finished last sentence whose one number restates a value computed
      before it (``... 5 * 9 = 45 liters.`` then ``The tank holds 45 liters.``; never a number only the question
      gave, ``She buys 3 apples.``). One explanatory sentence after the conclusion (no digit, math, doubt or
      setup word: ``This is the number of eggs sold each week.``) is passed over. An ``Answer`` heading takes
      the first line under it that is not a rule (``-----``) when that line is an answer. No "last number
      anywhere" fallback unless ``fallback_last_number=True``.
    * **Final-answer sentences**: ``Final Answer: The final answer is $X$. I hope it is correct.``
      (Minerva) gives ``X``; labels decorated with markdown or emoji (``🎯 **Final answer:** 9``),
      ``Answer \\[ 9 \\]`` without a colon, a ``### Final Answer`` heading with the value on the next
      line, GSM8K's ``#### 42``, and ``Final Answer: The volume of $V$ is 120.`` (the value after the
      last "is" of a sentence starting "The") are answer lines; so is such a sentence inside a box or
      tag, and a ``Final Answer:`` label run into the previous sentence on one line (``... = 120.
      Final Answer: ...``). A display block opened after the label (``Answer \\[`` newline ``9``
      newline ``\\]``) is its value. A prose final-answer sentence with no math, exactly one number
      and no negation, hedge, condition or comparison word (``Jane started 3 hours ago``; never
      ``3 more than Bob``) is that number; inside an answer line, an ``<answer>`` tag or a JSON field a
      leading condition that restates the question is read past (``Answer: If they share the stickers
      equally, each friend gets 6.`` is 6; the condition holds no digit, variable or negation, so ``If n is
      odd, 6`` stays one case of a case split), and a chain with a unit (``7 * 70 = 490 oranges``) is 490. A prose answer around exactly one math span (``\\boxed{We find that $x < 3$.}``) is that
      span, unless the prose holds a digit or a negation, hedge or condition word (``not``, ``maybe``,
      ``if``, ...); inline math (``$...$``, ``\\(...\\)``) never spans lines. An empty ``\\boxed{}`` quoted from the
      instructions is not an answer and does not block the answer sentence; ``\\boxed`` followed by a
      word is no box (``\\boxed 5`` is).
    * **Text after the final answer can only take its credit away** (``math_tail``, math-1.3.1): a
      self-correction after it (``\\boxed{5}`` then ``Wait, ...``, ``Actually the answer should be
      6``, ``that's wrong``, ``I made an error``, ``Let me recheck``, ``No, it's 6``, ``等等，我算错了``) or a contrast
      (``\\boxed{5}, but that ignores ...``, a next sentence opened by ``However``; not a check that confirms
      it, ``However, to be sure, let us check: 3 * 7 = 21, which confirms the answer.``, with no word of
      doubt; and an affirmation ``This answer is correct.`` is no rival answer) -> ``ambiguous``
      unless a "the answer is X" after the last retraction word restates it (then that is a rival
      that must agree); "mistake", "wrong" or "actually" alone are no retraction (``The common
      mistake is 6``). A final-answer label left empty at the very end (``\\boxed{5}`` then ``Final
      Answer:`` / ``So the answer is``) -> ``no_answer`` (cut off while answering); a final answer
      followed by ``?`` is asked, not stated (``ambiguous``); a "the answer is X" after the final box
      is a rival final answer. A "the answer is X" governed by a hypothesis (``Suppose the answer is
      5``, ``check whether the answer is 5``, ``If the answer is 5, ...``) is no answer, and several
      different ones are ``ambiguous``. A conclusion sentence or answer line stating two values (``Thus x is 12
      and y is 5.``, ``Answer: x = 5, so y = 10``, ``the smallest is 3 and the largest is 5``) or a
      bound (``at least 5``, ``It cannot be 5``) is no answer. The same holds inside and after ``<answer>`` tags (``<answer>5</answer>
      Wait, actually 6.``). A gold stored as a model solution is trusted text and read without these checks.
    * **Malformed final answers get no credit, never the earlier answer**: the last box is the final
      attempt, so a truncated (unclosed) or empty last box after an earlier answer is ``no_answer``
      (``details["problem"]`` says which); so is an unclosed ``<answer>`` after a closed one. A lone
      unclosed ``<answer>`` (generation stopped at ``</answer>``) runs to the end. More than
      ``math_extract.MAX_BOXES`` boxes or answer lines is ``ambiguous`` without being read.
    * **Several boxes**: the same value boxed in two forms (``\\boxed{m = 2}`` and ``\\boxed{2}``: an assignment
      to one name states its value) is one answer; boxes that together are exactly the answers of a multi-answer gold
      (``\\boxed{2}`` and ``\\boxed{5}`` for ``2, 5``, any order) are one answer; more or other
      boxes than the gold's answers are a hedge (``ambiguous``); a single-answer gold never accepts two
      different boxes.
    * **Golds as datasets store them**: a worked solution (MATH) is graded by its last ``\\boxed{}``;
      boxes joined to it by "and", ",", ";" or "or" (``\\boxed{1} and \\boxed{-2}``) are a multi-answer
      gold; a gold in prose that does not parse is read like a completion (its extracted final
      answer). A labelled gold names its value: ``(a, b) = (4, 1)``, ``k = 45, n = 2``, ``|AB| = 1``,
      ``\\frac{NO}{BO} = ...``, ``A:B = 1``, ``f(2) = 5`` (a label holds no operator: ``x + y = 5`` is
      an equation, not the value 5); ``(a, b) = (4, 1)`` also accepts ``b = 1, a = 4``.
    * **LaTeX**: ``\\frac``/``\\dfrac``/``\\tfrac``/``\\cfrac`` are one fraction; ``\\frac52\\pi`` =
      ``\\frac{5}{2}\\pi``; ``\\text``/``\\textnormal``/``\\textbf``/``\\mathrm``... wrappers and units;
      ``\\left(``/``\\right)`` and spacing commands (``\\quad``, ``\\!``) are presentation; JSON-escaped
      text (every command written ``\\\\frac``) has its backslashes halved, and so do common commands
      escaped twice in a mixture (``\\\\dfrac{1}{2} + \\frac{1}{72}``); ``pmatrix``, ``bmatrix``,
      ``array`` (also inside ``\\left[ ... \\right]``) are the same matrix when entries agree. Matrix
      arithmetic with numeric entries (``A + B``, ``A - B``, ``2A``, ``A B``, ``A \\cdot B``) is the
      evaluated matrix (``math_matrix``, exact); symbolic entries or powers are not evaluated.
    * **Numbers**: exact rational comparison: ``1,000`` = ``1000``; ``11,\\!111`` = ``11111``;
      ``1.5e3`` = ``1500``; ``\\frac{2}{4}`` = ``\\frac12`` = ``0.5``; mixed numbers ``2\\frac13`` = ``7/3``;
      a decimal comma (``1000,99``, ``0,111``: one or two digits, or a leading ``0,``, no space) equals
      the decimal when the other side is one number; ``1, 2`` is a list. A decimal inside an
      expression is exact (``10\\sqrt{10.5}`` = ``5\\sqrt{42}``). Arithmetic on numbers (``2^{10}``,
      ``5!``, ``\\binom{9}{2}``, ``\\frac{1}{3} + 1/4``) is computed exactly in the caller's process
      (``math_arith``), never in sympy; ``2^10`` (LaTeX: 2 to the 1, then 0) is left to sympy. ``x = \\frac13 \\approx 0.33`` is the
      exact value (the approximation after it is commentary).
    * **Tolerance**: half a unit of the gold's last place, only for an approximate gold (``≈``,
      ``约为``, ``approximately``, ``about``) or for an unmarked decimal gold against an exact value
      with no terminating decimal (``0.33`` vs ``\\frac13``); an unmarked ``82.0`` does not accept
      ``82.01`` (see ``math_compare.tolerance``). ``3.14`` is not ``\\pi``. A float rendering (10 or
      more significant digits, ``0.0833333333333333``) of a non-terminating rational gold is that
      value to every written digit and is accepted. Never ``gold*100`` / ``gold/100``.
    * **Percent**: ``X%`` equals ``X/100`` and also the bare ``X`` (``50\\%`` = ``0.5`` = ``50``):
      a bare number is accepted for a percent gold because "what percent ...?" answers routinely
      drop the sign, and the sign may equally be added to a bare gold. Nothing else rescales.
    * **Units**: a trailing unit word (``12 cm``, ``5\\text{ dollars}``, ``10^{3}\\text{ J}``) is
      presentation and dropped when only one side has a unit; when **both sides carry units that
      differ** (``8 kg`` vs ``8 g``; spellings such as ``km``/``kilometers`` are one unit, see
      ``math_normalize.unit_key``) the answers differ. Placeholders (``units``, ``square units``) are
      no unit. Words that change or qualify the value never are units (``5 hundred``,
      ``5 squared``, ``5 or more``, ``8\\text{k}``: parse error); ``5 million`` = ``5000000``;
      ``5 percent`` = ``5%``. A unit's power is part of it (``cm^2`` = ``square centimeters`` =
      ``sq cm``, not ``cm``); ``\\$8`` carries the unit dollar, and a percent against a unit differs
      (``\\$8`` is not ``8\\%``). A number trailed by an ellipsis (``5\\ldots``) is cut off: parse error.
      When both sides carry ``%`` the values must agree (``\\frac12\\%`` is not ``50\\%``).
    * **Degrees**: ``30^\\circ`` = ``30`` (the degree mark is presentation; no radian conversion;
      ``30^\\circ`` is not ``30 rad``/``30 radians``, and equals ``30^\\circ C``; a degree mark on a
      multiple of ``\\pi`` is a parse error);
      only a trailing mark after a number (``3^\\circ0`` and ``\\circ 30`` are not 30).
    * **Ordinals and truth values** (math-1.4.0): an ordinal suffix is presentation (``7^{\\text{th}} \\text{ place}``
      = ``7th`` = ``7``); Yes/No answer a True/False gold (``Yes`` = ``True``, ``No`` = ``False``).
    * **Choices**: ``\\text{(B)}`` = ``(B)`` = ``B`` = ``option B`` = ``B) 12`` = ``B. 12``; a bare
      lowercase letter is a variable. A prediction listing several letters (``B, A``, ``(A)(B)``,
      ``(C)/(D)``, ``(C) not (D)``) is never one choice. A gold ``(C) 12`` also accepts ``12``.
      Also (math-1.5.0, ``math_choices``): ``D (16)`` (a letter, then its option's text) is D; a finished last
      sentence ``The ratio of AB to AC is (B) 3/4.`` states B. A letter gold is decided by the final letter: a
      value stated beside one letter (``\\boxed{84}`` then ``The answer is (C).``) is passed over, several letters are
      a hedge. With the task's ``choices`` (``verify_math(..., choices=[...])``, a task record's ``choices`` field) a
      letter and its option's value are one answer (the value alone picks its option; a letter gives its value to
      a value gold) or a rival pair (``C (90)`` when C is 84, ``\\boxed{90}`` beside ``(C)``: ``ambiguous``); a
      value no option is known to equal is passed over when the letter is stated last. A value gold that is an
      option's text (``6cm``, MathVista) names that option: another option is wrong even when equal as arithmetic,
      and a range written low - high (``0.0 - 0.2``) is compared as written, never as the difference ``-0.2``.
    * **Sentences and conclusions** (math-1.5.0): the line under a bare ``Answer:`` is read like the marker's own
      line, and a sentence or labelled noun phrase in either states its one number (``Tom would still have 8
      marbles.``, ``Number of peaches = 52``, ``x = 27 bird families were left``, ``$75 by selling the eggs``, ``for
      45/5 = 9 weeks``), never a number followed by a word that changes it (``3 hundred``, ``5 squared``);
      ``Solution:`` above one finished closing line with no plan or setup word is a marker; an answer phrase that
      ends its line (``the correct answer is:``) states the next line. A last sentence that restates a computed
      value reads past a step label, numbers that restate a condition and appear before (``40 miles in 8 hours``;
      never a ratio, ``1 in 6``) and the words of a difference the working computed (``22 inches farther than``,
      ``5 more cups``; never with no working, ``3 times``, ``at least``); a closing check that names the value
      again with no word of doubt (``Check: 45 - 15 = 30.``) is passed over. Under a marker a labelled chain states
      its last link (``Total number of bolts = 2 bolts + 1 bolt = 3 bolts``); unmarked, a closing total ending in a
      number and its unit is finished without a full stop (``Total fruits: 13 + 14 = 27 fruits``), ``x`` between
      numbers multiplies, a lone ``$`` before a digit is a currency sign; "the final value / result is X" is an
      answer phrase.
    * **Structure**: intervals compare openness and endpoints, ``+\\infty`` = ``\\infty``; ``\\mathbb{R}`` = ``(-\\infty, \\infty)``; an inequality
      on one name equals its interval whatever the bracket shape (``x < 4`` = ``(-\\infty, 4)``,
      ``0 < f(x) < 1`` = ``(0, 1)``); sets and "and"/"or"-lists are unordered and name each solution
      once (a repeated solution is not an extra one); tuples are ordered (``(0;-2;6)`` is a tuple);
      ``p=5,q=2; p=7,q=2`` is two solutions ``(5, 2), (7, 2)``; a gold listing several answers needs
      all of them; ``x=3`` matches a bare ``3`` (assignment to a single name or Greek letter, not
      ``\\lim = 3``), and so does a function applied to numbers (``g(g(3)) = g(5) = 4`` is 4, ``f^{-1}(3) = 4``); ``x = 3, y = 4`` is two assignments (never the chain ``x = (3, y) = 4``) and
      matches the tuple ``(3, 4)``; **a chain of equalities states its last link** (``x = 5+5+1 = 7
      = 11`` is ``x = 11``; ``x = 11 = 5+6`` compares ``5+6``; an earlier link is never the answer; a link holding a
      connective, ``x = 5 \\Rightarrow y = 3`` or ``x = 5 \\text{ so } y = 3``, is two statements:
      parse error; ``x := 5`` is ``x = 5``)
      and arithmetic on numbers states its result (``5+5+1 = 11`` is ``11``; ``x + y = 5`` and
      ``7 = 11a + c`` stay equations); an unordered answer list written in round brackets is that
      list (``(5, 1, 3)`` for the gold ``\\{1, 3, 5\\}`` or ``1, 3, 5``), and a bare list in order is a
      tuple gold (``{1,3,5}``, TeX grouping, for ``(1, 3, 5)``; an explicit set is not), but a
      round-bracket *pair* may be an open interval, so it equals only a pair (or that interval):
      ``(1, 3)`` is not the roots ``1, 3`` and ``{1,3}`` is not ``(1, 3)``; a
      chain of inequalities between expressions (``f(2) < f(1) < f(4)``) is compared as written;
      ``1 \\le |z| \\le 2`` is ``[-2, -1] \\cup [1, 2]`` (numeric bounds);
      ``1 \\le x < 2``, ``x \\in [1, 2)``, ``\\{x \\mid 1 \\le x < 2\\}`` are ``[1, 2)`` and ``x \\le 2``
      is ``(-\\infty, 2]``; ``\\pm 1`` is the list ``1, -1``; ``0.\\overline{3}`` = ``\\frac13``; ``7:32``
      is a ratio compared term by term. Equations with the same solution set are equal (``2y = 4x + 2``
      = ``y = 2x + 1`` = ``2x - y + 1 = 0``: the sides' differences differ by a constant factor; a
      negative factor flips an inequality). Symbols keep their case in sympy (``X`` is not ``x``),
      and ``12 15`` (two numbers side by side) is a parse error, never a product or a sum.
    * **Prose answers** (``\\text{No, it isn't possible.}``; at least three words, see
      ``math_normalize.prose_key``) are compared word for word after lowercasing, ``n't`` -> ``not``
      and dropping sentence punctuation; more or other words are another answer
      (``There are infinitely many`` is not ``infinitely many``). Parsing is linear and bounded by
      ``math_parse.MAX_ANSWER_CHARS``.
    * **Guards**: power towers (also ``9^9^9``), exponents with > 4 digits, huge, iterated
      (``9!!!``) or computed (``(10^{10})!``) factorials and numbers with more
      than ``math_parse.MAX_DIGITS`` digits are refused cheaply (reason ``timeout``). In the sympy
      worker a numeric probe (the difference evaluated at rational points) rejects a wrong answer
      before ``simplify``; equality is always decided exactly.
    * A gold that cannot be parsed gives ``bad_gold``: a task-data problem, never a silent False.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ratchet.verifiers.math.choices import pick
from ratchet.verifiers.math.comparison import cas
from ratchet.verifiers.math.comparison.compare import NeedsCAS, compare
from ratchet.verifiers.math.extraction.extract import ANSWER_FORMATS, Extraction, extract_answer
from ratchet.verifiers.math.extraction.prose import _HEDGE
from ratchet.verifiers.math.golds import parsed_gold, split_gold
from ratchet.verifiers.math.parsing.parse import Answer, ParseError, TooLarge, parse_answer
from ratchet.verifiers.math.policy import VERSION
from ratchet.verifiers.verdict import Verdict


def _verdict(reason: str, parsed: str | None, t0: float, **details: object) -> Verdict:
    return Verdict.outcome("math", VERSION, reason, t0, parsed, **details)


def _cheap(
    gold: str,
    completion: str,
    fallback_last_number: bool,
    answer_format: str = "auto",
    choices: Sequence[str] | None = None,
) -> Verdict | tuple[str, str, str, float]:
    """Everything short of sympy. Returns a Verdict, or (gold, pred_text, parsed, t0) for the pool."""
    t0 = time.perf_counter()
    gold, options = split_gold(gold)  # a multiple-choice gold carries its options
    choices = choices if choices is not None else options
    gold, g, error = parsed_gold(gold)
    if g is None:
        return _verdict("bad_gold", None, t0, error=error)
    ex = extract_answer(completion, fallback_last_number=fallback_last_number, answer_format=answer_format)
    picked = pick(g, ex, choices, completion, gold)  # a letter gold, or a task that lists its options (``choices``)
    if picked is not None and picked[0] == "ambiguous":
        return _verdict("ambiguous", None, t0, source=ex.source, candidates=list(ex.candidates)[:5] or None, problem=picked[1])
    if picked is not None and picked[0] == "wrong":  # another option than the one the gold names
        return _verdict("wrong", f"({picked[1]})", t0, source=ex.source)
    joined = _joined_boxes(g, ex) if picked is None and ex.status != "ok" else None
    pred_text = picked[1] if picked is not None else ex.text if ex.status == "ok" else joined
    if pred_text is None:
        extra = {"problem": ex.problem} if ex.problem else {}
        return _verdict(ex.status, None, t0, source=ex.source, candidates=list(ex.candidates)[:5] or None, **extra)
    try:
        p = parse_answer(pred_text)
    except TooLarge as exc:
        return _verdict("timeout", pred_text[:200], t0, error=str(exc), guard=True)
    except ParseError as exc:
        return _verdict("parse_error", pred_text[:200], t0, error=str(exc))
    try:
        reason = compare(g, p)
    except NeedsCAS:
        return (gold, pred_text, p.canonical(), t0)
    if reason == "wrong" and joined is not None:
        reason = "ambiguous"  # several boxes that are not exactly the gold's answers: a hedge
    return _verdict(reason, p.canonical(), t0, source=ex.source)


def _joined_boxes(gold: Answer, ex: Extraction) -> str | None:
    """Several different boxes read as one list when the gold lists exactly that many answers, else None."""
    if ex.status != "ambiguous" or ex.problem or ex.source not in ("boxed", "answer_tag"):
        return None
    if gold.kind not in ("list", "set") or gold.hedged or len(gold.value) != len(ex.candidates):  # type: ignore[arg-type]
        return None
    if any(_HEDGE.search(c) for c in ex.candidates):
        return None
    return "; ".join(ex.candidates)


def verify_math(
    gold: str,
    completion: str,
    *,
    timeout_s: float = 2.0,
    fallback_last_number: bool = False,
    answer_format: str = "auto",
    choices: Sequence[str] | None = None,
) -> Verdict:
    """Judge one completion against a gold answer.

    Args:
        gold: the reference answer (LaTeX or plain text; may carry an "approximately" marker).
        completion: the model's full output.
        timeout_s: hard wall-clock limit for the sympy stage, seconds (the cheap stage takes
            microseconds and is not limited).
        fallback_last_number: opt-in "last number in the text" extraction (off: rewards hedging).
        answer_format: the final-answer marker the task asks for, ``"auto"`` (every marker, in the
            precedence of the policy docstring) or one of ``"boxed"``, ``"answer_line"``, ``"json"``,
            ``"gsm8k"`` (only that marker is read); recorded as ``details["answer_format"]``.
        choices: a multiple-choice task's option texts in letter order (``A``, ``B``, ...), or None: with them a
            letter and its option's value agree or are a rival pair (``ratchet.verifiers.math.choices``). A gold
            written by ``golds.choice_gold`` (a task record with a ``choices`` field) carries them itself.

    Returns:
        ``Verdict`` with ``verifier="math"``; reasons: ok, wrong, no_answer, ambiguous,
        parse_error, timeout, bad_gold.

    Raises:
        ValueError: ``timeout_s <= 0`` or an unknown ``answer_format`` (the message lists the valid ones).
    """
    return verify_math_batch(
        [(gold, completion)],
        timeout_s=timeout_s,
        fallback_last_number=fallback_last_number,
        answer_format=answer_format,
        choices=None if choices is None else [choices],
    )[0]


def verify_math_batch(
    pairs: Sequence[tuple[str, str]],
    *,
    timeout_s: float = 2.0,
    fallback_last_number: bool = False,
    answer_format: str | Sequence[str] = "auto",
    choices: Sequence[Sequence[str] | None] | None = None,
) -> list[Verdict]:
    """Judge many ``(gold, completion)`` pairs; same verdicts as ``verify_math``, faster.

    The cheap stage runs in this process; only the pairs that need sympy are sent to the worker
    pool, in parallel over ``POOL_SIZE`` processes, each with its own hard ``timeout_s``.
    ``answer_format`` is one format for all pairs or one per pair (tasks of several sources); ``choices`` is None
    or one entry per pair (a multiple-choice task's option texts, or None).

    Raises:
        ValueError: ``timeout_s <= 0``, an unknown answer format, or one format (or choices entry) per pair of the
            wrong length.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s ({timeout_s}) must be > 0 seconds; use e.g. 2.0")
    formats = [answer_format] * len(pairs) if isinstance(answer_format, str) else list(answer_format)
    if len(formats) != len(pairs):
        raise ValueError(f"{len(formats)} answer formats for {len(pairs)} pairs; pass one format or one per pair")
    options = [None] * len(pairs) if choices is None else list(choices)
    if len(options) != len(pairs):
        raise ValueError(f"{len(options)} choices entries for {len(pairs)} pairs; pass None or one entry (or None) per pair")
    for fmt in dict.fromkeys(formats):
        if fmt not in ANSWER_FORMATS:
            raise ValueError(f"answer_format {fmt!r} is unknown; use one of {', '.join(ANSWER_FORMATS)}")
    out: list[Verdict | None] = []
    slow: list[tuple[int, tuple[str, str, str, float]]] = []
    for i, ((gold, completion), fmt, opts) in enumerate(zip(pairs, formats, options)):
        r = _cheap(gold, completion, fallback_last_number, fmt, None if opts is None else tuple(opts))
        if isinstance(r, Verdict):
            out.append(_with_format(r, fmt))
        else:
            out.append(None)
            slow.append((i, r))
    if slow:
        t_pool = time.perf_counter()
        replies = cas.sympy_judge([(g, p) for _, (g, p, _, _) in slow], timeout_s)
        for (i, (_, _, parsed, t0)), reply in zip(slow, replies):
            if reply is None:
                out[i] = _verdict("timeout", parsed, t0, error=f"sympy stage killed after {timeout_s} s")
            else:
                v = _verdict(reply["reason"], parsed, t0, error=reply.get("error"), cas=True)
                if len(slow) > 1:  # per-item latency: the batch wall time is shared
                    v = Verdict(**{**v.to_dict(), "latency_s": (time.perf_counter() - t_pool) / len(slow)})
                out[i] = v
            out[i] = _with_format(out[i], formats[i])  # type: ignore[arg-type]
    return [v for v in out if v is not None]


def _with_format(v: Verdict, answer_format: str) -> Verdict:
    """``v`` with the answer format it was read under recorded in its details (``details["answer_format"]``)."""
    return Verdict(**{**v.to_dict(), "details": {**v.details, "answer_format": answer_format}})
