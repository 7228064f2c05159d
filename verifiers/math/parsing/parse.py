"""Stage 1b of math verification: parse an extracted final answer into a typed value (``parse_answer``).

Pure string work (regular expressions and exact ``fractions.Fraction`` arithmetic): nothing here
imports sympy. Anything that needs a computer-algebra system stays a ``kind="expression"`` leaf holding
normalized LaTeX; ``ratchet.verifiers.math.comparison.symbolic`` handles those in a killable worker process.
Normalization of the answer text (units, wrappers, approximation words) is ``math_normalize``;
finding the answer in a completion is ``math_extract``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal

from ratchet.verifiers.math.parsing import matrix as math_matrix
from ratchet.verifiers.math.parsing.arith import exact_value, is_range
from ratchet.verifiers.math.parsing.normalize import (
    KNOWN_FUNCS,
    ParseError,
    TooLarge,
    _balanced,
    _top_level_matches,
    normalize_with_unit,
    prose_key,
    split_top,
    strip_approx,
)

__all__ = ["Answer", "ParseError", "TooLarge", "parse_answer", "parse_number"]

AnswerKind = Literal[
    "integer",
    "rational",
    "decimal",
    "expression",
    "relation",
    "interval",
    "union",
    "set",
    "tuple",
    "matrix",
    "choice",
    "text",
    "list",
    "ratio",
]

MAX_ANSWER_CHARS = 2000  # longer "answers" are essays, not final answers: parse_error
MAX_DIGITS = 2000  # integers/decimals longer than this are refused (guards Fraction arithmetic)
MAX_SCI_EXPONENT = 400  # 1e400 is fine exactly; 1e99999999 would allocate a huge integer


@dataclass(frozen=True)
class Answer:
    """A parsed answer.

    Attributes:
        kind: the answer type.
        value: ``Fraction`` for numbers; ``str`` for choice/text/expression (normalized LaTeX);
            a tuple of ``Answer`` for containers; ``(lhs_text, op, rhs Answer)`` for a relation;
            ``(left_closed, lo, hi, right_closed)`` for an interval.
        places: decimal places written, for ``decimal``.
        approx: the text carried an "approximately" marker (gold: enables tolerance).
        percent: for ``X%``, the written number X (value is X/100).
        hedged: a list joined by "or" (a prediction listing candidates).
        parens: a 2-tuple written with round parentheses (may also mean an open interval).
        content: for a choice written with its option text (``(C) 12``), that text parsed.
        unit: the unit written after a number (canonical, ``math_normalize.unit_key``), or None.
    """

    kind: AnswerKind
    value: object
    places: int = 0
    approx: bool = False
    percent: Fraction | None = None
    hedged: bool = False
    parens: bool = False
    text: str = field(default="", compare=False)
    content: Answer | None = field(default=None, compare=False)
    unit: str | None = field(default=None, compare=False)

    def canonical(self) -> str:
        """A short canonical text of the value (stored as ``Verdict.parsed``)."""
        if self.kind in ("integer", "rational", "decimal"):
            v = self.value
            assert isinstance(v, Fraction)
            base = str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
            return base + ("%" if self.percent is not None else "")
        if self.kind in ("set", "list", "tuple", "union", "matrix", "ratio"):
            inner = ", ".join(a.canonical() if isinstance(a, Answer) else str(a) for a in self.value)  # type: ignore[union-attr]
            return {"set": "{%s}", "list": "[%s]", "tuple": "(%s)", "union": "U(%s)", "matrix": "M(%s)", "ratio": "R(%s)"}[
                self.kind
            ] % inner
        if self.kind == "interval":
            lc, lo, hi, rc = self.value  # type: ignore[misc]
            return f"{'[' if lc else '('}{lo.canonical()}, {hi.canonical()}{']' if rc else ')'}"
        if self.kind == "relation":
            lhs, op, rhs = self.value  # type: ignore[misc]
            return f"{lhs}{op}{rhs.canonical()}"
        return str(self.value)


# ----------------------------------------------------------------------------------------------
# parsing

_INT = re.compile(r"[+-]?\d+")
_THOUSANDS = re.compile(r"[+-]?(?!0[,\s])\d{1,3}(?:(?:,|\s)\d{3})+(?:\.\d+)?")  # "0,111" is no thousands
_DEC = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_SCI = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]|\s*(?:\\times|\\cdot|\*)\s*10\s*\^)\s*\{?\s*([+-]?\d+)\s*\}?")
_FRAC = re.compile(r"([+-]?)\\frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))")
_SLASH = re.compile(r"([+-]?)\(?\s*([+-]?\d+)\s*\)?\s*/\s*\(?\s*([+-]?\d+)\s*\)?")
_MIXED = re.compile(r"([+-]?)(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_CHOICE = re.compile(r"(?:\(([A-J])\)|([A-J])|\(([A-J])\)\s*.*|(?:option|choice)\s*\(?([A-J])\)?)", re.I)
_RELOPS = r"\\leq?(?![a-z])|\\geq?(?![a-z])|\\neq?(?![a-z])|\\lt(?![a-z])|\\gt(?![a-z])|<=|>=|!=|=|<|>"
_REL_CANON = {
    r"\le": "<=",
    r"\leq": "<=",
    r"\ge": ">=",
    r"\geq": ">=",
    r"\ne": "!=",
    r"\neq": "!=",
    r"\lt": "<",
    r"\gt": ">",
    "<=": "<=",
    ">=": ">=",
    "!=": "!=",
    "=": "=",
    "<": "<",
    ">": ">",
}
_EXPR_OK = re.compile(r"[A-Za-z0-9\s+\-*/^_=<>()\[\]{}|,.!\\']*")
_LATEX_CMDS = set(
    "frac sqrt pi infty cdot times div pm mp sin cos tan cot sec csc log ln exp arcsin arccos arctan sinh cosh tanh "
    "alpha beta gamma delta theta phi varphi omega lambda mu sigma tau rho epsilon varepsilon binom choose cup cap "
    "emptyset varnothing lfloor rfloor lceil rceil le leq ge geq ne neq lt gt in mathbb cdots ldots dots prime "
    "overline hat vec bar sum prod int lim to rightarrow mid vert lvert rvert angle triangle perp parallel "
    "operatorname max min gcd lcm det mod pmod bmod circ Delta Omega Gamma Theta Phi Lambda Sigma Pi psi chi eta "
    "zeta xi nu kappa iota setminus backslash not sim approx equiv propto".split()
)


def _guard_number_text(s: str) -> None:
    if len(re.sub(r"\D", "", s)) > MAX_DIGITS:
        raise TooLarge(f"number with more than {MAX_DIGITS} digits")


def parse_number(s: str) -> Answer | None:
    """Parse a plain number (integer, thousands-separated, decimal, scientific, fraction, mixed number).

    Returns None when ``s`` is not one of those forms; exact ``Fraction`` values, never floats.
    """
    s = s.strip()
    while s.startswith("(") and s.endswith(")") and _balanced(s[1:-1]) and "," not in s:
        s = s[1:-1].strip()
    if s[:1] in "+-" and s[1:2].isspace():  # "- 6" is -6
        s = s[0] + s[1:].lstrip()
    if s.startswith("+"):
        s = s[1:]
    _guard_number_text(s)
    if _INT.fullmatch(s):
        return Answer("integer", Fraction(int(s)), text=s)
    if _THOUSANDS.fullmatch(s):
        inner = re.sub(r"[,\s]", "", s)
        return parse_number(inner)
    if _DEC.fullmatch(s):
        places = len(s.split(".")[1])
        return Answer("decimal", Fraction(s), places=places, text=s)
    m = re.fullmatch(r"([+-]?)(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{(\d+)\}", s)
    if m:  # repeating decimal "0.1\\overline{6}" = 1/6 (exact)
        sign, whole, fixed, rep = m.groups()
        value = (
            int(whole or 0)
            + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
            + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        )
        value = -value if sign == "-" else value
        return Answer("integer" if value.denominator == 1 else "rational", value, text=s)
    m = _SCI.fullmatch(s)
    if m:
        exp = int(m.group(2))
        if abs(exp) > MAX_SCI_EXPONENT:
            raise TooLarge(f"scientific exponent {exp} beyond +-{MAX_SCI_EXPONENT}")
        value = Fraction(m.group(1)) * Fraction(10) ** exp
        places = max(0, len(m.group(1).split(".")[1]) - exp) if "." in m.group(1) else max(0, -exp)
        kind = "integer" if value.denominator == 1 else "decimal"
        return Answer(kind, value, places=places if kind == "decimal" else 0, text=s)
    for rx in (_FRAC, _SLASH):
        m = rx.fullmatch(s)
        if m:
            g = [x for x in m.groups()[1:] if x is not None]
            num, den = int(g[0]), int(g[1])
            if den == 0:
                raise ParseError(f"division by zero in {s!r}")
            value = Fraction(num, den) * (-1 if m.group(1) == "-" else 1)
            return Answer("integer" if value.denominator == 1 else "rational", value, text=s)
    m = _MIXED.fullmatch(s)
    if m:
        num, den = [int(x) for x in m.groups()[2:] if x is not None]
        if den == 0:
            raise ParseError(f"division by zero in {s!r}")
        value = int(m.group(2)) + Fraction(num, den)
        value = -value if m.group(1) == "-" else value
        return Answer("integer" if value.denominator == 1 else "rational", value, text=s)
    return None


def _check_expression(s: str) -> None:
    """Raise ParseError unless ``s`` looks like LaTeX math (no code, no prose); TooLarge for towers."""
    if not _EXPR_OK.fullmatch(s):
        bad = sorted({c for c in s if not _EXPR_OK.fullmatch(c)})
        raise ParseError(f"characters {''.join(bad)!r} are not LaTeX math")
    if not _balanced(s):
        raise ParseError("unbalanced brackets")
    for cmd in re.findall(r"\\([A-Za-z]+)", s):
        if cmd not in _LATEX_CMDS:
            raise ParseError(f"unknown LaTeX command \\{cmd}")
    for word in re.findall(r"(?<![\\A-Za-z])[A-Za-z]{3,}", s):
        if word.lower() not in KNOWN_FUNCS:
            raise ParseError(f"word {word!r} is not math")
    # power towers and huge exponents: reject before any CAS touches them
    for m in re.finditer(r"\^\s*(\{|\()", s):
        depth, i = 1, m.end()
        while i < len(s) and depth:
            depth += {"{": 1, "(": 1, "}": -1, ")": -1}.get(s[i], 0)
            i += 1
        exponent = s[m.end() : i - 1]
        if "^" in exponent or "!" in exponent:
            raise TooLarge(f"power tower in exponent {exponent!r}")
        for num in re.findall(r"\d+", exponent):
            if len(num) > 4:
                raise TooLarge(f"exponent {num} too large")
    for num in re.findall(r"\^\s*(\d+)", s):
        if len(num) > 4:
            raise TooLarge(f"exponent {num} too large")
    if re.search(r"\^\s*(?:\{[^{}]*\}|\\?[A-Za-z0-9]+)\s*\^", s):  # "9^9^9", "2^{99}^{99}"
        raise TooLarge(f"power tower in {s[:80]!r}")
    if re.search(r"!\s*!", s):  # "9!!!!!" reads as nested factorials
        raise TooLarge(f"iterated factorial in {s[:80]!r}")
    for m in re.finditer(r"[)}\]]\s*!", s):  # "(10^{10})!", "10^{10}!": factorial of a computed value
        depth, i = 0, m.start()
        while i >= 0:
            depth += {")": 1, "}": 1, "]": 1, "(": -1, "{": -1, "[": -1}.get(s[i], 0)
            if depth == 0:
                break
            i -= 1
        group, before = s[max(i, 0) : m.start() + 1], s[: max(i, 0)].rstrip()
        if re.search(r"[\^!]|\d{4,}", group) or before.endswith("^") or re.search(r"\\[a-z]+$", before):
            raise TooLarge(f"factorial of a large or computed value in {s[:80]!r}")
    if re.search(r"\d\s+\d", s):  # "12 15" lists two numbers; a CAS would read a product or a sum
        raise ParseError(f"two numbers side by side in {s[:80]!r}")
    for num in re.findall(r"(\d+)\s*!", s):
        if int(num) > 2000:
            raise TooLarge(f"factorial of {num}")


_CHOICE_TAIL_BAD = re.compile(
    r"(?<![A-Za-z\\])[A-J](?![A-Za-z])|\b(?:or|nor|not|but|maybe|perhaps|possibly|probably|except|instead|wrong|"
    r"incorrect|false|either|neither|unsure|guess)\b|\?"
)


def _parse_choice(s: str) -> Answer | None:
    """``B``, ``(B)``, ``option B``, ``(B) 12``, ``B) 12``, ``B. 12``, ``B: 12``, ``B (12)``; None when not a choice.

    The option text after the letter must not name another option or hedge (``(A), (B)``,
    ``(C) or (D)``, ``(C)/(D)``): that lists several choices.
    """
    t = s.strip()
    m = re.fullmatch(r"\(?\s*([A-J])\s*\)?|(?:option|choice)\s*\(?\s*([A-Ja-j])\s*\)?", t, re.I)
    if m:
        letter = next(g for g in m.groups() if g)
        if m.group(1) and letter.islower():
            return None  # a bare lowercase letter is a variable, not a choice
        return Answer("choice", letter.upper(), text=s)
    m = re.fullmatch(r"(?:\(\s*([A-Ja-j])\s*\)|([A-J])\s*[).:])\s*(.{1,80})", t, re.S) or re.fullmatch(
        r"()([A-J])\s{1,3}\(\s*([^()]{1,80})\s*\)\.?",
        t,  # "D (12)", "C (\frac{1}{3})": the letter, then its option's text
    )
    if not m or _CHOICE_TAIL_BAD.search(m.group(3)):
        return None
    letter = (m.group(1) or m.group(2)).upper()
    try:
        content = parse_answer(m.group(3), _inner=True)
    except ParseError:
        content = None
    return Answer("choice", letter, text=s, content=content)


def _parse_container(s: str) -> Answer | None:
    if s.startswith(r"\{") and s.endswith(r"\}"):
        inner = s[2:-2].strip()
        builder = re.fullmatch(r"(" + _SYMBOL + r")\s*(?:\||\\mid(?![a-z])|:)\s*(.+)", inner, re.S)
        if builder:  # set-builder "\\{x \\mid 1 \\le x < 2\\}": the condition is the answer
            return parse_answer(builder.group(2), _inner=True)
        items = [] if not inner else split_top(inner, r",|;")
        members: dict[str, Answer] = {}  # a set: {1, 1, 2} = {1, 2}; "\\pm 1" contributes two members
        for item in (parse_answer(i, _inner=True) for i in items):
            for a in item.value if item.kind == "list" and not item.hedged else (item,):  # type: ignore[attr-defined]
                members.setdefault(a.canonical(), a)
        return Answer("set", tuple(members.values()), text=s)
    wrapped = re.fullmatch(r"[(\[]\s*(\\begin\{([pbvB]?matrix|array)\}.*\\end\{\2\})\s*[)\]]", s, re.S)
    if wrapped:  # "\\left[\\begin{array}...\\end{array}\\right]": the brackets are the matrix's own
        s = wrapped.group(1)
    m = re.fullmatch(r"\\begin\{([pbvB]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}", s, re.S)
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(2)) if r.strip()]
        return Answer(
            "matrix", tuple(Answer("tuple", tuple(parse_answer(c, _inner=True) for c in r.split("&"))) for r in rows), text=s
        )
    if s[:1] in "([" and s[-1:] in ")]" and _balanced(s[1:-1]):
        items = split_top(s[1:-1], r",")
        if len(items) == 1:  # "(0;-2;6)": semicolons separate the coordinates
            items = split_top(s[1:-1], r";")
        if len(items) == 1:
            return None
        parsed = tuple(parse_answer(i, _inner=True) for i in items)
        if len(items) == 2 and (s[0] == "[" or s[-1] == "]"):
            return Answer("interval", (s[0] == "[", parsed[0], parsed[1], s[-1] == "]"), text=s)
        return Answer("tuple", parsed, parens=len(items) == 2 and s[0] == "(", text=s)
    return None


_OR_SEP = r"\s+or\s+|\\text\s*\{\s*or\s*\}|(?<=[)\]}])\s*or\s*(?=[(\[{\\])"  # "(11,7)or(7,11)" too
_RATIO = re.compile(r"([+-]?\d+(?:\.\d+)?)\s*:\s*([+-]?\d+(?:\.\d+)?)")
_GREEK = "alpha|beta|gamma|delta|theta|phi|varphi|omega|lambda|mu|sigma|tau|rho|psi|chi|eta|zeta|xi|nu|kappa"
_SYMBOL = r"(?:[A-Za-z]|\\(?:" + _GREEK + r"))(?:_\{?[A-Za-z0-9]+\}?)?"  # a name: x, y_1, \\theta (not \\lim)
_SHORT_WORDS = {"yes", "no", "odd", "all", "any", "one", "two", "six", "ten", "red", "tie", "win", "off", "on", "up"}
_MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!=", "~": "~"}


_ARITH_CMDS = re.compile(r"\\(?:[dtc]?frac|sqrt|times|cdot|div|left|right|pi)(?![A-Za-z])")
_COMPUTATION = re.compile(r"[\d\s+\-*/^().{}\[\]!]+")  # digits and operators, no name


_SINGLE_MATRIX = re.compile(r"[(\[]?\s*\\begin\{([pbvB]?matrix|array)\}(?:(?!\\begin\{).)*\\end\{\1\}\s*[)\]]?", re.S)


def _cell_number(cell: str) -> Fraction | None:
    """An exact number written in a matrix cell, or None."""
    try:
        a = parse_answer(cell, _inner=True)
    except ParseError:
        return None
    return a.value if a.kind in ("integer", "rational", "decimal") and a.percent is None else None  # type: ignore[return-value]


def _exact(v: Fraction) -> Answer:
    return Answer("integer" if v.denominator == 1 else "rational", v, text=str(v))


def _is_computation(side: str) -> bool:
    """A relation side that is arithmetic on numbers (``5+5+1``, ``\\frac{1}{2} \\cdot 4``): no name in it."""
    bare = _ARITH_CMDS.sub("", side)
    return bool(_COMPUTATION.fullmatch(bare)) and any(c.isdigit() for c in bare)


def _is_amount(side: str) -> bool:
    """A relation side that is one number with a unit word (``490 oranges``, ``12 \\text{ cm}``)."""
    try:
        a = parse_answer(side, _inner=True)
    except ParseError:
        return False
    return a.kind in ("integer", "rational", "decimal") and a.unit is not None


def _split_rel(s: str) -> tuple[list[str], list[str]]:
    """Split on relation operators outside brackets; return (sides, canonical operators)."""
    sides, ops, last = [], [], 0
    for m in _top_level_matches(s, re.compile(_RELOPS + r"|\\approx(?![a-z])")):
        sides.append(s[last : m.start()].strip())
        op = m.group(0).strip()
        ops.append("~" if op == r"\approx" else _REL_CANON[op])
        last = m.end()
    sides.append(s[last:].strip())
    return sides, ops


def _abs_band(lo: Answer, ops: list[str], hi: Answer, text: str) -> Answer | None:
    """``1 \\le |z| \\le 2`` as the union ``[-2, -1] \\cup [1, 2]`` (numeric bounds, ``0 < lo < hi``), else None."""
    if lo.kind not in ("integer", "rational", "decimal") or hi.kind not in ("integer", "rational", "decimal"):
        return None
    if lo.percent is not None or hi.percent is not None or not 0 < lo.value < hi.value:  # type: ignore[operator]
        return None
    lo_closed, hi_closed = ops[0] == "<=", ops[1] == "<="
    neg_lo, neg_hi = replace(lo, value=-lo.value), replace(hi, value=-hi.value)  # type: ignore[operator]
    left = Answer("interval", (hi_closed, neg_hi, neg_lo, lo_closed))
    right = Answer("interval", (lo_closed, lo, hi, hi_closed))
    return Answer("union", (left, right), text=text)


def _parse_relation(sides: list[str], ops: list[str], text: str) -> Answer:
    """``x = 3``, ``3 = x``, ``x = y = 3``, ``1 \\le x < 2`` (an interval), ``x \\approx 3``."""
    if not all(sides):
        raise ParseError(f"relation with an empty side in {text!r}")
    if len(sides) > 2 and ops[-1] == "~" and "~" not in ops[:-1]:  # "x = \\frac13 \\approx 0.33": the exact value
        sides, ops = sides[:-1], ops[:-1]
    if len(sides) == 2 and ops == ["~"] and not re.fullmatch(_SYMBOL, sides[0]):  # "\\frac13 \\approx 0.33"
        return parse_answer(sides[0], _inner=True)
    if len(sides) == 3 and re.fullmatch(_SYMBOL + r"(?:\([a-z]\))?", sides[1]) and "=" not in ops and "~" not in ops:
        if set(ops) <= {"<", "<="}:  # "1 \\le x < 2" is [1, 2)
            lo, hi = parse_answer(sides[0], _inner=True), parse_answer(sides[2], _inner=True)
            return Answer("interval", (ops[0] == "<=", lo, hi, ops[1] == "<="), text=text)
        if set(ops) <= {">", ">="}:  # "2 > x \\ge 1" is [1, 2)
            lo, hi = parse_answer(sides[2], _inner=True), parse_answer(sides[0], _inner=True)
            return Answer("interval", (ops[1] == ">=", lo, hi, ops[0] == ">="), text=text)
    if len(sides) == 3 and set(ops) <= {"<", "<="} and re.fullmatch(r"\|\s*" + _SYMBOL + r"\s*\|", sides[1]):
        union = _abs_band(parse_answer(sides[0], _inner=True), ops, parse_answer(sides[2], _inner=True), text)
        if union is not None:
            return union
    if len(sides) > 2:
        if not all(o == "=" for o in ops):  # "f(2) < f(1) < f(4)": compared as written (same text only)
            expr = re.sub(r"\s+", "", "".join(x + o for x, o in zip(sides, [*ops, ""])))
            _check_expression(expr)
            return Answer("expression", expr, text=text)
        if any(_CONNECTIVE.search(x) for x in sides[1:-1]):  # "x = 5 \\Rightarrow y = 3": two statements
            raise ParseError(f"two statements joined by a connective, not one chain of equalities: {text[:80]!r}")
        # "x = 5+5+1 = 7 = 11": a chain of equalities states its value in its last link (not a bare name)
        last = next((x for x in reversed(sides[1:]) if not re.fullmatch(_SYMBOL + r"(?:\([a-z]\))?", x)), sides[-1])
        sides, ops = [sides[0], last], ["="]
    lhs, op, rhs = sides[0], ops[0], sides[1]
    if op == "=" and _is_computation(lhs) and (_is_computation(rhs) or _is_amount(rhs)):
        return parse_answer(rhs, _inner=True)  # "5+5+1 = 11", "7 * 70 = 490 oranges": the computed value is the answer
    if re.fullmatch(_SYMBOL, rhs) and not re.fullmatch(_SYMBOL, lhs):  # "3 = x"
        lhs, op, rhs = rhs, _MIRROR[op], lhs
    if op == "~":  # "x \\approx 3": the stated value, marked approximate
        if not re.fullmatch(_SYMBOL, lhs):
            raise ParseError(f"approximation {text!r} has no single name on its left")
        return parse_answer(rhs, _inner=True)
    return Answer("relation", (lhs.replace(" ", ""), op, parse_answer(rhs, _inner=True)), text=text)


def parse_answer(text: str, *, _inner: bool = False) -> Answer:
    """Parse an answer text into a typed ``Answer`` (cached; see ``_parse_answer``)."""
    return _parse_cached(text, _inner)


@functools.lru_cache(maxsize=8192)  # a gold is parsed once per completion of its prompt; Answers are immutable
def _parse_cached(text: str, _inner: bool) -> Answer:
    return _parse_answer(text, _inner=_inner)


def _parse_answer(text: str, *, _inner: bool = False) -> Answer:
    """Parse an answer text into a typed ``Answer`` without any computer algebra.

    Args:
        text: an extracted answer (or a gold label), LaTeX or plain text.

    Returns:
        The typed answer; numbers are exact ``Fraction`` values. Non-trivial expressions come
        back as ``kind="expression"`` holding normalized LaTeX (checked to look like math).

    Raises:
        ParseError: the text is empty, not math and not a short text answer, or unbalanced.
        TooLarge: huge exponents, power towers, giant numbers or factorials.
    """
    if len(text) > MAX_ANSWER_CHARS:
        raise ParseError(f"answer of {len(text)} characters exceeds {MAX_ANSWER_CHARS}")
    raw, approx = strip_approx(text)
    prose = prose_key(raw)
    if prose is not None:  # "\\text{No, it is not possible.}": compared word for word
        return Answer("text", prose, text=text)
    s, percent, unit = normalize_with_unit(raw)
    if not s:
        raise ParseError("empty answer")
    if _OPEN_ENDED.search(s):
        raise ParseError(f"a number trailed by an ellipsis is cut off or open-ended, not a value: {text[:60]!r}")
    ans = _parse_normalized(s, percent, approx, text)
    return replace(ans, unit=unit) if unit and ans.kind in _UNIT_KINDS else ans


_CONNECTIVE = re.compile(
    r"\\(?:Rightarrow|Longrightarrow|implies|iff|Leftrightarrow|therefore|because)(?![a-zA-Z])"
    r"|\b(?:so|then|hence|thus|and|or|therefore|since|because|implies)\b"
)
# "5\\ldots", "5 \\dots": a value cut off or left open (a list "1, 2, \\ldots" or "1 + 2 + \\cdots" is not this)
_OPEN_ENDED = re.compile(r"^[^,;+\-]{0,40}?\d\s{0,3}(?:\\[lc]?dots\b|\.{3}|…)\s{0,3}$")
_UNIT_KINDS = ("integer", "rational", "decimal", "expression")


def _parse_normalized(s: str, percent: bool, approx: bool, text: str) -> Answer:
    """``parse_answer`` after normalization: ``s`` is the normalized text, ``text`` the original."""
    # several answers: "1331 and 1728", "2 or 3", "x=1; x=2"
    for sep, hedged in ((_OR_SEP, True), (r"\s+and\s+|;|\\text\s*\{\s*and\s*\}", False)):
        parts = [p for p in split_top(s, sep) if p]
        if len(parts) > 1:
            items = []
            for p in parts:
                group = split_top(p, ",") if not _THOUSANDS.fullmatch(p) else [p]
                if len(group) > 1 and all(len(_split_rel(g)[0]) == 2 for g in group):
                    items.append(p)  # "p=5,q=2; p=7,q=2": each group is one solution, not four answers
                else:
                    items.extend(group)
            return Answer("list", tuple(parse_answer(p, _inner=True) for p in items if p), hedged=hedged, text=text)
    pm = split_top(s, r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])")
    if len(pm) == 2 and not re.search(_RELOPS, s):  # "\\pm 1" -> 1, -1; "3 \\pm \\sqrt{2}" -> both roots
        a, b = pm
        items = [b, f"-{b}"] if not a else [f"{a}+{b}", f"{a}-{b}"]
        return Answer("list", tuple(parse_answer(i, _inner=True) for i in items), text=text)
    ratio = _RATIO.fullmatch(s)
    if ratio:  # "7:32" is the ratio (7, 32), compared term by term
        return Answer("ratio", tuple(parse_answer(x, _inner=True) for x in ratio.groups()), text=text)
    num = parse_number(s)
    if num is not None:
        pct = num.value if percent else None
        value = num.value / 100 if percent else num.value
        kind = num.kind if not percent else ("integer" if value.denominator == 1 else "rational")  # type: ignore[operator]
        return Answer(kind, value, places=num.places, approx=approx, percent=pct, text=text)  # type: ignore[arg-type]
    choice = _parse_choice(s)
    if choice is not None:
        return choice
    if r"\cup" in s:
        parts = split_top(s, r"\\cup")
        if len(parts) > 1:
            return Answer("union", tuple(parse_answer(p, _inner=True) for p in parts), text=text)
    if r"\begin{" in s and not _SINGLE_MATRIX.fullmatch(s):  # "A + B", "2A", "A B": the evaluated matrix
        rows = math_matrix.evaluate(s, _cell_number)
        if rows is not None:
            return Answer("matrix", tuple(Answer("tuple", tuple(_exact(v) for v in r)) for r in rows), text=text)
    container = _parse_container(s)
    if container is not None:
        return container
    member = re.fullmatch(r"(" + _SYMBOL + r")\s*\\in\s*(.+)", s, re.S)
    if member:  # "x \\in [1, 2)": the set is the answer
        return parse_answer(member.group(2), _inner=True)
    items = split_top(s, r",")
    if len(items) > 1 and all(items) and any(len(_split_rel(i)[0]) > 1 for i in items):
        # "x = 3, y = 4": one relation per item, never one chain read across the commas
        return Answer("list", tuple(parse_answer(i, _inner=True) for i in items), text=text)
    sides, ops = _split_rel(s)
    if len(sides) > 1:
        return _parse_relation(sides, ops, text)
    if len(items) > 1 and all(items):
        return Answer("list", tuple(parse_answer(i, _inner=True) for i in items), text=text)
    if (
        re.fullmatch(r"[A-Za-z][A-Za-z '\-]*[A-Za-z]", s)
        and (" " in s or s.lower() not in KNOWN_FUNCS)
        and re.search(r"[A-Za-z]{2,}", s)
    ):  # "x - y" is an expression, not a phrase
        if not re.fullmatch(r"[a-z]{2,3}", s) or " " in s or s in _SHORT_WORDS:  # "xy" is a product of symbols
            return Answer("text", re.sub(r"\s+", " ", s.lower()), text=text)
    if is_range(s):  # "0.0 - 0.2": a range (low - high), compared as written, never the difference -0.2
        return Answer("text", re.sub(r"\s+", " ", s), text=text)
    _check_expression(s)
    value = None if percent else exact_value(s)
    if value is not None:  # "2^{10}", "5!", "\\frac{1}{3} + 1/4": arithmetic on numbers, computed exactly
        return Answer("integer" if value.denominator == 1 else "rational", value, approx=approx, text=text)
    return Answer("expression", s, approx=approx, percent=Fraction(1) if percent else None, text=text)
