"""Exact arithmetic on numbers written in LaTeX (``2^{10}``, ``5!``, ``\\binom{9}{2}``, ``\\frac{1}{3} + 1/4``).

An answer that is arithmetic on numbers has one exact rational value; computing it with
``fractions.Fraction`` decides the comparison in the caller's process instead of a sympy worker
(whose LaTeX parser costs 15-250 ms per new expression shape). Anything else (a name, a root, a
constant such as ``\\pi``, implicit multiplication, a non-integer exponent) returns None and stays a
sympy expression. A small recursive-descent parser over a token list: no ``eval``, no recursion
deeper than ``MAX_DEPTH``, results bounded to ``MAX_DIGITS`` digits.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

MAX_DIGITS = 2000  # same bound as math_parse: a larger value is refused, never computed
MAX_DEPTH = 40  # nesting of groups; deeper text goes to sympy (and its guards)
MAX_TOKENS = 200

_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d+)?)|(\\[dt]?frac|\\binom|\\cdot|\\times|\\div|\\left|\\right)(?![A-Za-z])|([-+*/^!(){}\[\]]))"
)


class _Refuse(Exception):
    """Not plain arithmetic on numbers (or too large): the caller falls back to sympy."""


def _tokens(text: str) -> list[str]:
    out, pos, s = [], 0, text.strip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if m is None or m.end() == pos:
            raise _Refuse(s[pos : pos + 10])
        pos = m.end()
        tok = next(g for g in m.groups() if g is not None)
        if tok not in (r"\left", r"\right"):
            out.append(tok)
        if len(out) > MAX_TOKENS:
            raise _Refuse("too long")
    return out


def _bounded(v: Fraction) -> Fraction:
    if max(abs(v.numerator), v.denominator).bit_length() > MAX_DIGITS * 3.33:
        raise _Refuse("too large")
    return v


class _Parser:
    """expr := term (+|- term)*; term := unary ((*|/|\\cdot|\\times|\\div) unary)*; unary := (+|-) unary | power;
    power := postfix (^ exponent)?; postfix := atom !*; atom := number | (expr) | {expr} | \\frac g g | \\binom g g."""

    def __init__(self, tokens: list[str]) -> None:
        self.toks, self.i, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Refuse(f"expected {expected}")
        self.i += 1
        return tok

    def expr(self) -> Fraction:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refuse("too deep")
        v = self.term()
        while self.peek() in ("+", "-"):
            v = _bounded(v + self.term() if self.take() == "+" else v - self.term())
        self.depth -= 1
        return v

    def term(self) -> Fraction:
        v = self.unary()
        while self.peek() in ("*", "/", r"\cdot", r"\times", r"\div"):
            op, rhs = self.take(), self.unary()
            if op in ("/", r"\div"):
                if rhs == 0:
                    raise _Refuse("division by zero")
                v = _bounded(v / rhs)
            else:
                v = _bounded(v * rhs)
        return v

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> Fraction:
        base = self.postfix()
        if self.peek() != "^":
            return base
        self.take()
        exp = self.group() if self.peek() == "{" else self.number_or_paren()  # a bracket is an atom's
        if exp.denominator != 1 or (base == 0 and exp <= 0):
            raise _Refuse("exponent")
        size = abs(exp) * max(math.log10(max(abs(base.numerator), base.denominator)), 0)
        if size > MAX_DIGITS:
            raise _Refuse("too large")
        return _bounded(base ** int(exp))

    def postfix(self) -> Fraction:
        v = self.atom()
        while self.peek() == "!":
            self.take()
            if v.denominator != 1 or not 0 <= v <= 800:  # 800! has ~1977 digits
                raise _Refuse("factorial")
            v = Fraction(math.factorial(int(v)))
        return v

    def number_or_paren(self) -> Fraction:
        """An exponent without braces: one digit (``2^10`` is 2^1 then 0 in LaTeX: refused) or a bracket."""
        tok = self.peek()
        if tok is not None and tok.isdigit() and len(tok) == 1:
            return Fraction(self.take())
        if tok == "(":
            return self.atom()
        raise _Refuse("exponent")

    def group(self) -> Fraction:
        self.take("{")
        v = self.expr()
        self.take("}")
        return v

    def atom(self) -> Fraction:
        tok = self.peek()
        if tok is None:
            raise _Refuse("end")
        if tok[0].isdigit():
            return Fraction(self.take())
        if tok in ("(", "[", "{"):
            close = {"(": ")", "[": "]", "{": "}"}[self.take()]
            v = self.expr()
            self.take(close)
            return v
        if tok in (r"\frac", r"\dfrac", r"\tfrac", r"\binom"):
            self.take()
            a, b = self._two_args()
            if tok == r"\binom":
                if a.denominator != 1 or b.denominator != 1 or not 0 <= b <= a <= 2000:
                    raise _Refuse("binom")
                return _bounded(Fraction(math.comb(int(a), int(b))))
            if b == 0:
                raise _Refuse("division by zero")
            return a / b
        raise _Refuse(tok)

    def _arg(self) -> Fraction:
        """One ``\\frac`` argument: a group or a single digit (``\\frac1{72}``)."""
        tok = self.peek()
        if tok == "{":
            return self.group()
        if tok is not None and tok.isdigit() and len(tok) == 1:
            return Fraction(int(self.take()))
        raise _Refuse("\\frac argument")

    def _two_args(self) -> tuple[Fraction, Fraction]:
        tok = self.peek()
        if tok is not None and tok.isdigit() and len(tok) == 2:  # "\\frac12" is 1/2
            self.take()
            return Fraction(int(tok[0])), Fraction(int(tok[1]))
        return self._arg(), self._arg()


def exact_value(text: str) -> Fraction | None:
    """The exact rational value of arithmetic on numbers written in LaTeX, or None.

    Args:
        text: a normalized answer (``math_normalize``) that already passed ``math_parse``'s guards.

    Returns:
        The value, or None when the text is anything but ``+ - * / ^ !``, ``\\cdot``, ``\\times``,
        ``\\div``, brackets, ``\\frac``/``\\dfrac``/``\\tfrac``, ``\\binom`` and numbers (``2(3)``,
        ``\\pi``, ``\\sqrt{2}``, ``x`` give None), or when a value would pass ``MAX_DIGITS`` digits.
    """
    try:
        p = _Parser(_tokens(text))
        v = p.expr()
        return v if p.peek() is None else None
    except (_Refuse, RecursionError, ValueError, OverflowError, ZeroDivisionError):
        return None


_RANGE = re.compile(r"(\d+(?:\.\d+)?)\s{1,3}[-–]\s{1,3}(\d+(?:\.\d+)?)")


def is_range(text: str) -> bool:
    """Whether ``text`` is a range of values written low - high with spaces (``0.0 - 0.2``, ``10 - 20``): an answer
    naming an interval of a chart or table, never the difference ``-0.2`` (``5 - 3`` stays arithmetic)."""
    m = _RANGE.fullmatch(text.strip())
    return m is not None and Fraction(m.group(1)) < Fraction(m.group(2))
