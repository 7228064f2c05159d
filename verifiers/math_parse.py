"""Stage 1 of math verification: find the final answer in a completion and parse it into a typed value.

Pure string work (regular expressions and exact ``fractions.Fraction`` arithmetic): nothing here
imports sympy, so extraction and the cheap parse of numbers, choices, sets, intervals and text run
in the caller's process in microseconds. Anything that needs a computer-algebra system stays a
``kind="expression"`` leaf holding normalized LaTeX; ``verifiers.math_sympy`` handles those in a
killable worker process.

Extraction rules (``extract_answer``):
    * text inside ``<think>...</think>`` is never graded; an unclosed ``<think>`` hides the rest,
      a stray ``</think>`` hides everything before it;
    * if there is an ``<answer>...</answer>`` block, only its content is graded (a ``\\boxed{}``
      inside it wins over the surrounding words);
    * otherwise every ``\\boxed{}``/``\\fbox{}``; otherwise ``Answer: X`` lines; otherwise the last
      ``the answer is X`` statement;
    * several *different* final answers, or hedge words ("one of", "either", "maybe", ...), give
      ``ambiguous``; there is no "last number anywhere" fallback unless asked for
      (``fallback_last_number=True``), because it rewards hedging.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

AnswerKind = Literal[
    "integer", "rational", "decimal", "expression", "relation", "interval", "union", "set", "tuple",
    "matrix", "choice", "text", "list",
]

MAX_ANSWER_CHARS = 2000  # longer "answers" are essays, not final answers: parse_error
MAX_DIGITS = 2000  # integers/decimals longer than this are refused (guards Fraction arithmetic)
MAX_SCI_EXPONENT = 400  # 1e400 is fine exactly; 1e99999999 would allocate a huge integer


class ParseError(ValueError):
    """The text was found but cannot be read completely as one answer."""


class TooLarge(ParseError):
    """The answer would be too expensive to evaluate (huge exponent, power tower, giant factorial)."""


@dataclass(frozen=True)
class Extraction:
    """Where the final answer was found.

    Attributes:
        text: the extracted answer text, or None.
        status: ``"ok"``, ``"no_answer"`` or ``"ambiguous"``.
        source: ``"answer_tag"``, ``"boxed"``, ``"answer_line"``, ``"answer_phrase"``, ``"last_number"`` or ``""``.
        candidates: every distinct candidate seen (several -> ambiguous).
    """

    text: str | None
    status: Literal["ok", "no_answer", "ambiguous"]
    source: str = ""
    candidates: tuple[str, ...] = ()


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
    """

    kind: AnswerKind
    value: object
    places: int = 0
    approx: bool = False
    percent: Fraction | None = None
    hedged: bool = False
    parens: bool = False
    text: str = field(default="", compare=False)

    def canonical(self) -> str:
        """A short canonical text of the value (stored as ``Verdict.parsed``)."""
        if self.kind in ("integer", "rational", "decimal"):
            v = self.value
            assert isinstance(v, Fraction)
            base = str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
            return base + ("%" if self.percent is not None else "")
        if self.kind in ("set", "list", "tuple", "union", "matrix"):
            inner = ", ".join(a.canonical() if isinstance(a, Answer) else str(a) for a in self.value)  # type: ignore[union-attr]
            return {"set": "{%s}", "list": "[%s]", "tuple": "(%s)", "union": "U(%s)", "matrix": "M(%s)"}[self.kind] % inner
        if self.kind == "interval":
            lc, lo, hi, rc = self.value  # type: ignore[misc]
            return f"{'[' if lc else '('}{lo.canonical()}, {hi.canonical()}{']' if rc else ')'}"
        if self.kind == "relation":
            lhs, op, rhs = self.value  # type: ignore[misc]
            return f"{lhs}{op}{rhs.canonical()}"
        return str(self.value)


# ----------------------------------------------------------------------------------------------
# extraction

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_LINE = re.compile(r"(?im)^[\s*#>_-]*(?:\**\s*)?(?:final\s+answer|answer)\s*\**\s*[:：]\s*\**\s*(.+?)\s*$")
_ANSWER_PHRASE = re.compile(
    r"(?i)(?:the\s+)?(?:final\s+)?answer\s+(?:is|would\s+be|will\s+be|=)\s*[:：]?\s*(.+?)\s*(?:$|\n|(?<!\d)\.(?!\d)|\.\s)"
    r"|(?:答案|结果)\s*(?:是|为|：|:)\s*(.+?)\s*(?:$|\n|。)"
)
_HEDGE = re.compile(
    r"(?i)\b(?:one\s+of|either|maybe|perhaps|possibly|probably|might\s+be|could\s+be|not\s+sure|or\s+maybe|i\s+think|guess)\b|\?\s*$"
)
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _strip_think(text: str) -> str:
    text = _THINK_BLOCK.sub(" ", text)
    low = text.lower()
    close = low.rfind("</think>")
    if close >= 0:
        text = text[close + len("</think>"):]
        low = text.lower()
    opening = low.find("<think>")
    if opening >= 0:
        text = text[:opening]
    return text


def find_boxed(text: str) -> list[str]:
    """Return the contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), in order."""
    out: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*(\{|\s)", text):
        if m.group(1) != "{":  # "\boxed 5": one token
            tok = re.match(r"\s*([^\s$]+)", text[m.end():])
            if tok:
                out.append(tok.group(1))
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end(): i - 1].strip())
    return out


def _clean_candidate(s: str) -> str:
    s = s.strip().strip("*").strip()
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s).strip()
    return s.rstrip(".。,;").strip()


def _distinct(cands: list[str]) -> list[str]:
    seen: dict[str, str] = {}
    for c in cands:
        key = re.sub(r"\s+|\$", "", c)
        try:
            key = parse_answer(c).canonical()
        except ParseError:
            pass
        seen.setdefault(key, c)
    return list(seen.values())


def _decide(cands: list[str], source: str) -> Extraction:
    cands = [_clean_candidate(c) for c in cands]
    cands = [c for c in cands if c]
    if not cands:
        return Extraction(None, "no_answer", source)
    distinct = _distinct(cands)
    if len(distinct) > 1:
        return Extraction(None, "ambiguous", source, tuple(distinct))
    text = distinct[0]
    if _HEDGE.search(text):
        return Extraction(None, "ambiguous", source, (text,))
    return Extraction(text, "ok", source, (text,))


def extract_answer(completion: str, *, fallback_last_number: bool = False) -> Extraction:
    """Find the final answer of a completion (see the module docstring for the rules).

    Args:
        completion: the model's full output text.
        fallback_last_number: opt-in: when no marked answer exists, use the last number in the
            text. Off by default because it rewards hedging and rambling.

    Returns:
        An ``Extraction``; ``text`` is None unless ``status == "ok"``.
    """
    visible = _strip_think(completion)
    tags = _ANSWER_TAG.findall(visible)
    if not tags and re.search(r"<answer>", visible, re.I):
        tags = [re.split(r"(?i)<answer>", visible)[-1]]
    if tags:
        if len(_distinct([_clean_candidate(t) for t in tags if t.strip()])) > 1:
            return Extraction(None, "ambiguous", "answer_tag", tuple(tags))
        inner = tags[-1]
        boxed = find_boxed(inner)
        if boxed:
            return _decide(boxed, "answer_tag")
        lines = _ANSWER_LINE.findall(inner)
        phrases = [a or b for a, b in _ANSWER_PHRASE.findall(inner)]
        if lines or phrases:
            return _decide(lines or phrases[-1:], "answer_tag")
        return _decide([inner], "answer_tag")
    boxed = find_boxed(visible)
    if boxed:
        return _decide(boxed, "boxed")
    lines = _ANSWER_LINE.findall(visible)
    if lines:
        return _decide(lines, "answer_line")
    phrases = [a or b for a, b in _ANSWER_PHRASE.findall(visible)]
    if phrases:
        return _decide(phrases[-1:], "answer_phrase")
    if fallback_last_number:
        nums = _LAST_NUMBER.findall(visible)
        if nums:
            return Extraction(nums[-1], "ok", "last_number", (nums[-1],))
    return Extraction(None, "no_answer", "")


# ----------------------------------------------------------------------------------------------
# normalization

_APPROX = re.compile(
    r"^\s*(?:≈|\\approx|~|\\sim|约为|约等于|大约|约|approximately|approx\.?|about|around|roughly|nearly|circa)\s*[:：]?\s*",
    re.I,
)
_SPACES_CMD = re.compile(r"\\[,;:! ]|\\q?quad\b|\\displaystyle|\\(?:left|right|big|Big|bigg|Bigg)[lr]?(?![a-zA-Z])")
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|boldsymbol)\s*\{([^{}]*)\}")
_UNICODE = {"−": "-", "–": "-", "×": r"\times ", "·": r"\cdot ", "≤": r"\le ", "≥": r"\ge ", "≠": r"\ne ",
            "∞": r"\infty ", "π": r"\pi ", "√": r"\sqrt", "，": ",", "：": ":", "（": "(", "）": ")", "÷": "/"}
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\\circ")
_UNIT_WORD = re.compile(r"^(.*?\d)\s*(?:\\?\$)?\s*((?:[a-zA-Z]{2,}\.?|[a-zA-Z]{2,}\s*\^?\s*\{?[23]\}?)(?:\s*(?:/|per)\s*[a-zA-Z]+)?(?:\s+[a-zA-Z]{2,})*)$")
KNOWN_FUNCS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "arcsin", "arccos",
               "arctan", "sinh", "cosh", "tanh", "lg", "max", "min", "gcd", "lcm", "det", "mod", "pmod", "bmod"}


def strip_approx(text: str) -> tuple[str, bool]:
    """Remove a leading "approximately" marker; return (rest, had_marker)."""
    m = _APPROX.match(text)
    return (text[m.end():], True) if m and m.end() < len(text) else (text, False)


def normalize(text: str) -> tuple[str, bool]:
    """Normalize LaTeX presentation; return (text, had_percent). Degrees and units are dropped."""
    s = text.strip()
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s).strip()
    s = _SPACES_CMD.sub(" ", s).replace("~", " ")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\{,\}", ",", s)
    s = _DEGREE.sub("", s)
    prev = None
    while prev != s:  # unwrap nested \text{...}
        prev = s
        s = _WRAPPERS.sub(lambda m: m.group(1), s)
    s = s.replace(r"\$", "").replace("\\\\", " ")
    percent = False
    if re.search(r"\\?%\s*$", s):
        s, percent = re.sub(r"\\?%\s*$", "", s), True
    s = re.sub(r"\s+", " ", s).strip().rstrip(".。").strip()
    m = _UNIT_WORD.match(s)
    if m and not any(w in KNOWN_FUNCS for w in re.findall(r"[a-zA-Z]+", m.group(2))) and not re.search(r"[=<>]", s):
        s = m.group(1).strip()
    if re.search(r"\\?%\s*$", s) and not percent:
        s, percent = re.sub(r"\\?%\s*$", "", s).strip(), True
    return s, percent


def split_top(s: str, seps: str) -> list[str]:
    """Split ``s`` on the regex ``seps`` where it occurs outside (), [], {} (and \\{ \\})."""
    parts, depth, last = [], 0, 0
    pattern = re.compile(seps)
    i = 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            m = pattern.match(s, i)
            if m and m.end() > i:
                parts.append(s[last:i])
                last = i = m.end()
                continue
        i += 1
    parts.append(s[last:])
    return [p.strip() for p in parts]


# ----------------------------------------------------------------------------------------------
# parsing

_INT = re.compile(r"[+-]?\d+")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:(?:,|\s)\d{3})+(?:\.\d+)?")
_DEC = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)")
_SCI = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]|\s*(?:\\times|\\cdot|\*)\s*10\s*\^)\s*\{?\s*([+-]?\d+)\s*\}?")
_FRAC = re.compile(r"([+-]?)\\frac\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))\s*(?:\{\s*([+-]?\d+)\s*\}|(\d))")
_SLASH = re.compile(r"([+-]?)\(?\s*([+-]?\d+)\s*\)?\s*/\s*\(?\s*([+-]?\d+)\s*\)?")
_MIXED = re.compile(r"([+-]?)(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_CHOICE = re.compile(r"(?:\(([A-J])\)|([A-J])|\(([A-J])\)\s*.*|(?:option|choice)\s*\(?([A-J])\)?)", re.I)
_RELOPS = r"\\leq?(?![a-z])|\\geq?(?![a-z])|\\neq?(?![a-z])|\\lt(?![a-z])|\\gt(?![a-z])|<=|>=|!=|=|<|>"
_REL_CANON = {r"\le": "<=", r"\leq": "<=", r"\ge": ">=", r"\geq": ">=", r"\ne": "!=", r"\neq": "!=",
              r"\lt": "<", r"\gt": ">", "<=": "<=", ">=": ">=", "!=": "!=", "=": "=", "<": "<", ">": ">"}
_EXPR_OK = re.compile(r"[A-Za-z0-9\s+\-*/^_=<>()\[\]{}|,.!\\']*")
_LATEX_CMDS = {"frac", "sqrt", "pi", "infty", "cdot", "times", "div", "pm", "mp", "sin", "cos", "tan", "cot",
               "sec", "csc", "log", "ln", "exp", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "alpha",
               "beta", "gamma", "delta", "theta", "phi", "varphi", "omega", "lambda", "mu", "sigma", "tau", "rho",
               "epsilon", "varepsilon", "binom", "choose", "cup", "cap", "emptyset", "varnothing", "lfloor",
               "rfloor", "lceil", "rceil", "le", "leq", "ge", "geq", "ne", "neq", "lt", "gt", "in", "mathbb",
               "cdots", "ldots", "dots", "prime", "overline", "hat", "vec", "bar", "sum", "prod", "int", "lim",
               "to", "rightarrow", "mid", "vert", "lvert", "rvert", "angle", "triangle", "perp", "parallel",
               "operatorname", "max", "min", "gcd", "lcm", "det", "mod", "pmod", "bmod", "circ", "Delta", "Omega",
               "Gamma", "Theta", "Phi", "Lambda", "Sigma", "Pi", "psi", "chi", "eta", "zeta", "xi", "nu", "kappa",
               "iota", "setminus", "backslash", "not", "sim", "approx", "equiv", "propto"}


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


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


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
        exponent = s[m.end(): i - 1]
        if "^" in exponent or "!" in exponent:
            raise TooLarge(f"power tower in exponent {exponent!r}")
        for num in re.findall(r"\d+", exponent):
            if len(num) > 4:
                raise TooLarge(f"exponent {num} too large")
    for num in re.findall(r"\^\s*(\d+)", s):
        if len(num) > 4:
            raise TooLarge(f"exponent {num} too large")
    for num in re.findall(r"(\d+)\s*!", s):
        if int(num) > 2000:
            raise TooLarge(f"factorial of {num}")


def _parse_choice(s: str) -> Answer | None:
    t = s.strip()
    m = re.fullmatch(r"\(?\s*([A-J])\s*\)?|\(\s*([A-J])\s*\)\s*.{0,60}|(?:option|choice)\s*\(?\s*([A-Ja-j])\s*\)?", t, re.I | re.S)
    if not m:
        return None
    letter = next(g for g in m.groups() if g)
    if m.group(1) and letter.islower():
        return None  # a bare lowercase letter is a variable, not a choice
    return Answer("choice", letter.upper(), text=s)


def _parse_container(s: str) -> Answer | None:
    if s.startswith(r"\{") and s.endswith(r"\}"):
        inner = s[2:-2].strip()
        items = [] if not inner else split_top(inner, r",|;")
        return Answer("set", tuple(parse_answer(i, _inner=True) for i in items), text=s)
    m = re.fullmatch(r"\\begin\{([pbvB]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}", s, re.S)
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(2)) if r.strip()]
        return Answer("matrix", tuple(Answer("tuple", tuple(parse_answer(c, _inner=True) for c in r.split("&")))
                                      for r in rows), text=s)
    if s[:1] in "([" and s[-1:] in ")]" and _balanced(s[1:-1]):
        items = split_top(s[1:-1], r",")
        if len(items) == 1:
            return None
        parsed = tuple(parse_answer(i, _inner=True) for i in items)
        if len(items) == 2 and (s[0] == "[" or s[-1] == "]"):
            return Answer("interval", (s[0] == "[", parsed[0], parsed[1], s[-1] == "]"), text=s)
        return Answer("tuple", parsed, parens=len(items) == 2 and s[0] == "(", text=s)
    return None


def parse_answer(text: str, *, _inner: bool = False) -> Answer:
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
    s, percent = normalize(raw)
    if not s:
        raise ParseError("empty answer")
    # several answers: "1331 and 1728", "2 or 3", "x=1; x=2"
    for sep, hedged in ((r"\s+or\s+|\\text\s*\{\s*or\s*\}", True), (r"\s+and\s+|;|\\text\s*\{\s*and\s*\}", False)):
        parts = [p for p in split_top(s, sep) if p]
        if len(parts) > 1:
            items = []
            for p in parts:
                items.extend(split_top(p, ",") if not _THOUSANDS.fullmatch(p) else [p])
            return Answer("list", tuple(parse_answer(p, _inner=True) for p in items if p), hedged=hedged, text=text)
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
    container = _parse_container(s)
    if container is not None:
        return container
    rel = split_top(s, _RELOPS)
    if len(rel) > 1:
        ops = [m.group(0) for m in re.finditer(_RELOPS, s)]
        if len(rel) == 2 or (len(rel) > 2 and all(o == "=" for o in ops)):
            # "x = y = 3": the last side is the value
            lhs = rel[-2] if len(rel) == 2 else rel[0]
            return Answer("relation", (lhs.replace(" ", ""), _REL_CANON[ops[-1].strip()], parse_answer(rel[-1], _inner=True)),
                          text=text)
        raise ParseError(f"chained relation {s!r}")
    items = split_top(s, r",")
    if len(items) > 1 and all(items):
        return Answer("list", tuple(parse_answer(i, _inner=True) for i in items), text=text)
    if re.fullmatch(r"[A-Za-z][A-Za-z '\-]*[A-Za-z]", s) and (" " in s or s.lower() not in KNOWN_FUNCS) and len(s) > 1:
        if not re.fullmatch(r"[a-z]{2,3}", s) or " " in s:  # "xy" is a product of symbols
            return Answer("text", re.sub(r"\s+", " ", s.lower()), text=text)
    _check_expression(s)
    return Answer("expression", s, approx=approx, percent=Fraction(1) if percent else None, text=text)
