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
from typing import Iterator, Literal

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
        content: for a choice written with its option text (``(C) 12``), that text parsed.
    """

    kind: AnswerKind
    value: object
    places: int = 0
    approx: bool = False
    percent: Fraction | None = None
    hedged: bool = False
    parens: bool = False
    text: str = field(default="", compare=False)
    content: "Answer | None" = field(default=None, compare=False)

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

_REASONING_TAGS = r"(?:think|thinking|thought|thoughts|reasoning|reflection|scratchpad)"
_THINK_BLOCK = re.compile(rf"<\s*({_REASONING_TAGS})\s*>.*?<\s*/\s*\1\s*>", re.S | re.I)
_THINK_OPEN = re.compile(rf"<\s*{_REASONING_TAGS}\s*>", re.I)
_THINK_CLOSE = re.compile(rf"<\s*/\s*{_REASONING_TAGS}\s*>", re.I)
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
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # a stray closing tag hides everything before it
        text = text[closes[-1].end():]
    opening = _THINK_OPEN.search(text)
    if opening:  # an unclosed opening tag hides the rest
        text = text[:opening.start()]
    return text


def find_boxed(text: str) -> list[str]:
    """Return the contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (balanced braces), in order."""
    out: list[str] = []
    for m in re.finditer(r"\\(?:boxed|fbox)(?![A-Za-z])\s*(\{|\s|(?=[0-9+-]))", text):
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


def _outermost_free(boxes: list[str]) -> list[str]:
    """Drop box contents that themselves hold a box (``\\boxed{\\boxed{3}}``): the inner box is listed too."""
    return [b for b in boxes if not re.search(r"\\(?:boxed|fbox)(?![A-Za-z])", b)]


def _parses(text: str) -> bool:
    """Whether ``text`` reads as a mathematical answer (prose such as "see above" does not count)."""
    try:
        return parse_answer(_clean_candidate(text)).kind != "text"
    except ParseError:
        return False


def _decide(cands: list[str], source: str, rivals: list[str] | None = None) -> Extraction:
    """One final answer from ``cands``; ``rivals`` (answers stated elsewhere) can only make it ambiguous."""
    cands = [_clean_candidate(c) for c in cands]
    cands = [c for c in cands if c]
    if not cands:
        return Extraction(None, "no_answer", source)
    rival = [c for c in (_clean_candidate(r) for r in rivals or []) if c]
    distinct = _distinct(cands + rival)
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
        outside = _outermost_free(find_boxed(_ANSWER_TAG.sub(" ", visible)))  # a second, different final answer
        boxed = _outermost_free(find_boxed(inner))
        if boxed:
            return _decide(boxed, "answer_tag", outside)
        lines = _ANSWER_LINE.findall(inner)
        phrases = [a or b for a, b in _ANSWER_PHRASE.findall(inner)]
        if lines or phrases:
            return _decide(lines or phrases[-1:], "answer_tag", outside)
        return _decide([inner], "answer_tag", outside)
    boxed = _outermost_free(find_boxed(visible))
    if boxed:
        # an "Answer: X" line that disagrees with the box is a second final answer (a hedge)
        lines = [ln for ln in _ANSWER_LINE.findall(visible) if not re.search(r"\\(?:boxed|fbox)", ln)]
        return _decide(boxed, "boxed", [ln for ln in lines if _parses(ln)])
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
_SPACES_CMD = re.compile(r"(?<!\\)\\[,;:! ]|\\q?quad\b|\\displaystyle|\\(?:left|right|big|Big|bigg|Bigg)[lr]?(?![a-zA-Z])")
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mathit|mbox|operatorname|boldsymbol)\s*\{([^{}]*)\}")
_UNICODE = {"−": "-", "–": "-", "×": r"\times ", "·": r"\cdot ", "≤": r"\le ", "≥": r"\ge ", "≠": r"\ne ",
            "∞": r"\infty ", "π": r"\pi ", "√": r"\sqrt", "，": ",", "：": ":", "（": "(", "）": ")", "÷": "/",
            "≈": r"\approx ", "∈": r"\in ", "∪": r"\cup ", "±": r"\pm ", "∓": r"\mp "}
# a degree mark is presentation only right after a number/group and at the end of it ("30^\\circ",
# not "3^\\circ0" nor "\\circ 30", which would otherwise read as 30)
_DEGREE = re.compile(r"(?<=[\d}\s])\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\\circ)(?!\s*[\d.])")
_TEXT_UNIT = re.compile(r"(?<=[\d}])\s*\\(?:text|mathrm|textrm|mbox|rm)\s*\{\s*([A-Za-z][A-Za-z .]*?)\s*\}"
                        r"\s*(?:\^\s*\{?\s*-?[1-3]\s*\}?)?\s*$")
# words after a number that change or qualify its value: never dropped as if they were units
_MULTIPLIERS = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_NOT_UNITS = set(_MULTIPLIERS) | {
    "hundreds", "thousands", "millions", "billions", "dozen", "dozens", "score", "gross", "half", "halves", "third",
    "thirds", "quarter", "quarters", "fourth", "fourths", "fifth", "fifths", "sixth", "sixths", "eighth", "eighths",
    "tenth", "tenths", "hundredth", "hundredths", "thousandth", "thousandths", "millionth", "millionths", "squared",
    "cubed", "percent", "percentage", "pct", "factorial", "inverse", "reciprocal", "negative", "positive", "times",
    "over", "plus", "minus", "divided", "by", "choose", "mod", "modulo", "to", "the", "power", "or", "and", "not", "no",
    "nor", "less", "more", "fewer", "least", "most", "up", "down", "is", "are", "was", "were", "ish", "roughly",
    "approx", "approximately", "about", "around", "nearly", "almost", "so", "maybe", "perhaps", "probably",
    "possibly", "wrong", "incorrect", "false", "true", "but", "only", "at", "than", "of", "except", "excluding",
    "including", "if", "else", "otherwise", "infinity", "infinite", "many", "much", "repeating", "recurring", "etc",
    "root", "roots", "sqrt", "log", "exp", "pi", "plusminus", "pm", "either", "also", "any", "all", "each", "per",
    "cent", "ten", "hundredfold", "fold", "twice", "thrice", "double", "triple", "e", "i", "ii", "iii", "mult",
}
_UNIT_WORD = re.compile(r"^(.*?\d)\s*(?:\\?\$)?\s*((?:[a-zA-Z]{2,}\.?|[a-zA-Z]{2,}\s*\^?\s*\{?[23]\}?)(?:\s*(?:/|per)\s*[a-zA-Z]+)?(?:\s+[a-zA-Z]{2,})*)$")
KNOWN_FUNCS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "arcsin", "arccos",
               "arctan", "sinh", "cosh", "tanh", "lg", "max", "min", "gcd", "lcm", "det", "mod", "pmod", "bmod"}


def strip_approx(text: str) -> tuple[str, bool]:
    """Remove a leading "approximately" marker; return (rest, had_marker)."""
    m = _APPROX.match(text)
    return (text[m.end():], True) if m and m.end() < len(text) else (text, False)


def _unit_words_ok(words: list[str]) -> bool:
    """Whether trailing words are a unit (``cm``, ``square units``), not a value change or a hedge."""
    return bool(words) and not any(w.lower() in _NOT_UNITS or w in KNOWN_FUNCS for w in words)


def _strip_unit(s: str) -> tuple[str, bool]:
    """Drop a trailing unit after a number; ``5 million`` -> ``5 \\times 10^{6}``; ``5 percent`` -> percent."""
    m = _UNIT_WORD.match(s)
    if not m or re.search(r"[=<>]", s):
        return s, False
    words = re.findall(r"[a-zA-Z]+", m.group(2))
    head, percent, scale = m.group(1).strip(), False, ""
    if words and words[0].lower() in _MULTIPLIERS:
        scale = f" \\times 10^{{{_MULTIPLIERS[words.pop(0).lower()]}}}"
    elif words and words[0].lower() in ("percent", "percentage", "pct"):
        words.pop(0)
        percent = True
    if words and not _unit_words_ok(words):
        return s, False
    if not words and not (scale or percent):
        return s, False
    if scale and not re.fullmatch(r"[+-]?\d[\d,]*(?:\.\d+)?", head):
        return s, False  # "2\\sqrt{3} million": not a plain number to scale
    return head + scale, percent


def normalize(text: str) -> tuple[str, bool]:
    """Normalize LaTeX presentation; return (text, had_percent). Degrees and units are dropped."""
    s = text.strip()
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s).strip()
    s = _SPACES_CMD.sub(" ", s).replace("~", " ")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\lbrace(?![a-zA-Z])", r"\\{", re.sub(r"\\rbrace(?![a-zA-Z])", r"\\}", s))
    s = re.sub(r"\\sqrt\s*([0-9a-zA-Z])(?![0-9])", r"\\sqrt{\1}", s)  # "\\sqrt2" = "\\sqrt{2}" (one token)
    s = re.sub(r"\{,\}", ",", s)
    s = _DEGREE.sub("", s)
    m = _TEXT_UNIT.search(s)
    if m and _unit_words_ok(m.group(1).split()):  # "1.5 \\times 10^{3} \\text{ J}", "30\\text{C}"
        s = s[:m.start()]
    prev = None
    while prev != s:  # unwrap nested \text{...}
        prev = s
        s = _WRAPPERS.sub(lambda m: m.group(1), s)
    s = s.replace(r"\$", "")
    if not re.search(r"\\begin\s*\{", s):  # matrix rows keep their "\\\\" separators
        s = s.replace("\\\\", " ")
    percent = False
    if re.search(r"\\?%\s*$", s):
        s, percent = re.sub(r"\\?%\s*$", "", s), True
    s = re.sub(r"\s+", " ", s).strip().rstrip(".。").strip()
    while s.startswith("{") and s.endswith("}") and _balanced(s[1:-1]):  # "{{2}}" is 2
        s = s[1:-1].strip()
    s, word_percent = _strip_unit(s)
    if word_percent and percent:
        raise ParseError(f"two percent marks in {text!r}")
    percent = percent or word_percent
    if re.search(r"\\?%\s*$", s) and not percent:
        s, percent = re.sub(r"\\?%\s*$", "", s).strip(), True
    if re.fullmatch(r"\\(?:emptyset|varnothing)|\\\{\s*\\\}|\{\s*\}", s):
        s = r"\{\}"
    return s, percent


def _top_level_matches(s: str, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
    """Non-empty, non-overlapping matches of ``pattern`` outside (), [], {} (and \\{ \\}), left to right."""
    depth, i = 0, 0
    while i < len(s):
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            m = pattern.match(s, i)
            if m and m.end() > i:
                yield m
                i = m.end()
                continue
        i += 1


def split_top(s: str, seps: str) -> list[str]:
    """Split ``s`` on the regex ``seps`` where it occurs outside (), [], {} (and \\{ \\})."""
    parts, last = [], 0
    for m in _top_level_matches(s, re.compile(seps)):
        parts.append(s[last:m.start()])
        last = m.end()
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
    m = re.fullmatch(r"([+-]?)(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{(\d+)\}", s)
    if m:  # repeating decimal "0.1\\overline{6}" = 1/6 (exact)
        sign, whole, fixed, rep = m.groups()
        value = (int(whole or 0) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed else 0)
                 + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed)))
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
        group, before = s[max(i, 0): m.start() + 1], s[:max(i, 0)].rstrip()
        if re.search(r"[\^!]|\d{4,}", group) or before.endswith("^") or re.search(r"\\[a-z]+$", before):
            raise TooLarge(f"factorial of a large or computed value in {s[:80]!r}")
    if re.search(r"\d\s+\d", s):  # "12 15" lists two numbers; a CAS would read a product or a sum
        raise ParseError(f"two numbers side by side in {s[:80]!r}")
    for num in re.findall(r"(\d+)\s*!", s):
        if int(num) > 2000:
            raise TooLarge(f"factorial of {num}")


_CHOICE_TAIL_BAD = re.compile(
    r"(?<![A-Za-z\\])[A-J](?![A-Za-z])|\b(?:or|nor|not|but|maybe|perhaps|possibly|probably|except|instead|wrong|"
    r"incorrect|false|either|neither|unsure|guess)\b|\?")


def _parse_choice(s: str) -> Answer | None:
    """``B``, ``(B)``, ``option B``, ``(B) 12``, ``B) 12``, ``B. 12``, ``B: 12``; None when not a choice.

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
    m = re.fullmatch(r"(?:\(\s*([A-Ja-j])\s*\)|([A-J])\s*[).:])\s*(.{1,80})", t, re.S)
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
            for a in (item.value if item.kind == "list" and not item.hedged else (item,)):  # type: ignore[attr-defined]
                members.setdefault(a.canonical(), a)
        return Answer("set", tuple(members.values()), text=s)
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


_GREEK = "alpha|beta|gamma|delta|theta|phi|varphi|omega|lambda|mu|sigma|tau|rho|psi|chi|eta|zeta|xi|nu|kappa"
_SYMBOL = r"(?:[A-Za-z]|\\(?:" + _GREEK + r"))(?:_\{?[A-Za-z0-9]+\}?)?"  # a name: x, y_1, \\theta (not \\lim)
_SHORT_WORDS = {"yes", "no", "odd", "all", "any", "one", "two", "six", "ten", "red", "tie", "win", "off", "on", "up"}
_MIRROR = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!=", "~": "~"}


def _split_rel(s: str) -> tuple[list[str], list[str]]:
    """Split on relation operators outside brackets; return (sides, canonical operators)."""
    sides, ops, last = [], [], 0
    for m in _top_level_matches(s, re.compile(_RELOPS + r"|\\approx(?![a-z])")):
        sides.append(s[last:m.start()].strip())
        op = m.group(0).strip()
        ops.append("~" if op == r"\approx" else _REL_CANON[op])
        last = m.end()
    sides.append(s[last:].strip())
    return sides, ops


def _parse_relation(sides: list[str], ops: list[str], text: str) -> Answer:
    """``x = 3``, ``3 = x``, ``x = y = 3``, ``1 \\le x < 2`` (an interval), ``x \\approx 3``."""
    if not all(sides):
        raise ParseError(f"relation with an empty side in {text!r}")
    if len(sides) == 3 and re.fullmatch(_SYMBOL, sides[1]) and "=" not in ops and "~" not in ops:
        if set(ops) <= {"<", "<="}:  # "1 \\le x < 2" is [1, 2)
            lo, hi = parse_answer(sides[0], _inner=True), parse_answer(sides[2], _inner=True)
            return Answer("interval", (ops[0] == "<=", lo, hi, ops[1] == "<="), text=text)
        if set(ops) <= {">", ">="}:  # "2 > x \\ge 1" is [1, 2)
            lo, hi = parse_answer(sides[2], _inner=True), parse_answer(sides[0], _inner=True)
            return Answer("interval", (ops[1] == ">=", lo, hi, ops[0] == ">="), text=text)
    if len(sides) > 2:
        if not all(o == "=" for o in ops):
            raise ParseError(f"chained relation {text!r}")
        values = {n.value for n in (parse_number(x) for x in sides) if n is not None}
        if len(values) > 1:  # "x = 4 = 3" states two different values
            raise ParseError(f"chain of equalities with different values in {text!r}")
        sides, ops = [sides[0], sides[-1]], ["="]
    lhs, op, rhs = sides[0], ops[0], sides[1]
    if re.fullmatch(_SYMBOL, rhs) and not re.fullmatch(_SYMBOL, lhs):  # "3 = x"
        lhs, op, rhs = rhs, _MIRROR[op], lhs
    if op == "~":  # "x \\approx 3": the stated value, marked approximate
        if not re.fullmatch(_SYMBOL, lhs):
            raise ParseError(f"approximation {text!r} has no single name on its left")
        return parse_answer(rhs, _inner=True)
    return Answer("relation", (lhs.replace(" ", ""), op, parse_answer(rhs, _inner=True)), text=text)


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
    pm = split_top(s, r"\\pm(?![a-zA-Z])|\\mp(?![a-zA-Z])")
    if len(pm) == 2 and not re.search(_RELOPS, s):  # "\\pm 1" -> 1, -1; "3 \\pm \\sqrt{2}" -> both roots
        a, b = pm
        items = [b, f"-{b}"] if not a else [f"{a}+{b}", f"{a}-{b}"]
        return Answer("list", tuple(parse_answer(i, _inner=True) for i in items), text=text)
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
    if (re.fullmatch(r"[A-Za-z][A-Za-z '\-]*[A-Za-z]", s) and (" " in s or s.lower() not in KNOWN_FUNCS)
            and re.search(r"[A-Za-z]{2,}", s)):  # "x - y" is an expression, not a phrase
        if not re.fullmatch(r"[a-z]{2,3}", s) or " " in s or s in _SHORT_WORDS:  # "xy" is a product of symbols
            return Answer("text", re.sub(r"\s+", " ", s.lower()), text=text)
    _check_expression(s)
    return Answer("expression", s, approx=approx, percent=Fraction(1) if percent else None, text=text)
