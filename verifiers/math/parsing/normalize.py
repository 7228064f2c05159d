"""Normalization of an answer's text before parsing: approximation words, LaTeX spacing and wrappers,
unicode, degrees and unit words, and bracket-aware splitting at top level. Pure string work.
"""

from __future__ import annotations

import re
from collections.abc import Iterator


class ParseError(ValueError):
    """The text was found but cannot be read completely as one answer."""


class TooLarge(ParseError):
    """The answer would be too expensive to evaluate (huge exponent, power tower, giant factorial)."""


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(c, 0)
        if depth < 0:
            return False
    return depth == 0


# ----------------------------------------------------------------------------------------------
# normalization

_APPROX = re.compile(
    r"^\s*(?:≈|\\approx|~|\\sim|约为|约等于|大约|约|approximately|approx\.?|about|around|roughly|nearly|circa)\s*[:：]?\s*",
    re.I,
)
_SPACES_CMD = re.compile(r"(?<!\\)\\[,;:! ]|\\q?quad|\\displaystyle|\\(?:left|right|big|Big|bigg|Bigg)[lr]?(?![a-zA-Z])")
_TEXT_CMDS = r"text|textbf|textit|textrm|textnormal|textsf|texttt|textup|mathrm|mathbf|mathit|mathsf|mathtt|mbox|rm|bf"
_WRAPPERS = re.compile(r"\\(?:" + _TEXT_CMDS + r"|operatorname|boldsymbol)\s*\{([^{}]*)\}")
_UNICODE = {
    "−": "-",
    "–": "-",
    "×": r"\times ",
    "·": r"\cdot ",
    "≤": r"\le ",
    "≥": r"\ge ",
    "≠": r"\ne ",
    "∞": r"\infty ",
    "π": r"\pi ",
    "√": r"\sqrt",
    "，": ",",
    "：": ":",
    "（": "(",
    "）": ")",
    "÷": "/",
    "≈": r"\approx ",
    "∈": r"\in ",
    "∪": r"\cup ",
    "±": r"\pm ",
    "∓": r"\mp ",
}
# a degree mark is presentation only right after a number/group and at the end of it ("30^\\circ",
# not "3^\\circ0" nor "\\circ 30", which would otherwise read as 30)
_DEGREE = re.compile(r"(?<=[\d}\s])\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\\circ)(?!\s*[\d.])")
_TEXT_UNIT = re.compile(
    r"(?<=[\d}])\s*\\(?:" + _TEXT_CMDS + r")\s*\{\s*([A-Za-z][A-Za-z .]*?)\s*\}"
    r"\s*(?:\^\s*\{?\s*(-?[1-3])\s*\}?)?\s*$"
)
# an ordinal suffix right after a number: "7^{th}" (after \\text{} is unwrapped), "7th", "21st", "2^{nd}"
_ORDINAL = re.compile(
    r"(?<=\d)(?:\s{0,3}\^\s{0,3}\{\s{0,3}(?:st|nd|rd|th)\s{0,3}\}|\s{0,3}\^\s{0,3}(?:st|nd|rd|th)|(?:st|nd|rd|th))(?![A-Za-z])"
)
# words after a number that change or qualify its value: never dropped as if they were units
_MULTIPLIERS = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_NOT_UNITS = set(_MULTIPLIERS) | {
    "hundreds",
    "thousands",
    "millions",
    "billions",
    "dozen",
    "dozens",
    "score",
    "gross",
    "half",
    "halves",
    "third",
    "thirds",
    "quarter",
    "quarters",
    "fourth",
    "fourths",
    "fifth",
    "fifths",
    "sixth",
    "sixths",
    "eighth",
    "eighths",
    "tenth",
    "tenths",
    "hundredth",
    "hundredths",
    "thousandth",
    "thousandths",
    "millionth",
    "millionths",
    "squared",
    "cubed",
    "percent",
    "percentage",
    "pct",
    "factorial",
    "inverse",
    "reciprocal",
    "negative",
    "positive",
    "times",
    "over",
    "plus",
    "minus",
    "divided",
    "by",
    "choose",
    "mod",
    "modulo",
    "to",
    "the",
    "power",
    "or",
    "and",
    "not",
    "no",
    "nor",
    "less",
    "more",
    "fewer",
    "least",
    "most",
    "up",
    "down",
    "is",
    "are",
    "was",
    "were",
    "ish",
    "roughly",
    "approx",
    "approximately",
    "about",
    "around",
    "nearly",
    "almost",
    "so",
    "maybe",
    "perhaps",
    "probably",
    "possibly",
    "wrong",
    "incorrect",
    "false",
    "true",
    "but",
    "only",
    "at",
    "than",
    "of",
    "except",
    "excluding",
    "including",
    "if",
    "else",
    "otherwise",
    "infinity",
    "infinite",
    "many",
    "much",
    "repeating",
    "recurring",
    "etc",
    "root",
    "roots",
    "sqrt",
    "log",
    "exp",
    "pi",
    "plusminus",
    "pm",
    "either",
    "also",
    "any",
    "all",
    "each",
    "per",
    "cent",
    "ten",
    "hundredfold",
    "fold",
    "twice",
    "thrice",
    "double",
    "triple",
    "e",
    "i",
    "ii",
    "iii",
    "mult",
    "k",  # 8k, 8\\text{k}: thousands, a value change (never dropped as a unit)
    "bn",
    "mn",
    "mil",
    "mln",
    "lakh",
    "crore",
}
_UNIT_WORD = re.compile(
    r"^(.*?\d)\s*(?:\\?\$)?\s*((?:[a-zA-Z]{2,}\.?|[a-zA-Z]{2,}\s*\^?\s*\{?[23]\}?)(?:\s*(?:/|per)\s*[a-zA-Z]+)?(?:\s+[a-zA-Z]{2,})*)$"
)
KNOWN_FUNCS = set(
    "sin cos tan cot sec csc log ln exp sqrt arcsin arccos arctan sinh cosh tanh lg max min gcd lcm det mod pmod bmod".split()
)


def strip_approx(text: str) -> tuple[str, bool]:
    """Remove a leading "approximately" marker; return (rest, had_marker)."""
    m = _APPROX.match(text)
    return (text[m.end() :], True) if m and m.end() < len(text) else (text, False)


def _unit_words_ok(words: list[str]) -> bool:
    """Whether trailing words are a unit (``cm``, ``square units``), not a value change or a hedge."""
    return bool(words) and not any(w.lower() in _NOT_UNITS or w in KNOWN_FUNCS for w in words)


# spellings of one unit; a unit not listed here is compared by its lowercase text, plural "s" dropped
_UNIT_ALIASES = {
    "m": "meter",
    "metre": "meter",
    "cm": "centimeter",
    "centimetre": "centimeter",
    "mm": "millimeter",
    "km": "kilometer",
    "kilometre": "kilometer",
    "g": "gram",
    "gm": "gram",
    "kg": "kilogram",
    "mg": "milligram",
    "s": "second",
    "sec": "second",
    "min": "minute",
    "h": "hour",
    "hr": "hour",
    "hrs": "hour",
    "mins": "minute",
    "secs": "second",
    "ft": "foot",
    "feet": "foot",
    "in": "inch",
    "inches": "inch",
    "mi": "mile",
    "l": "liter",
    "litre": "liter",
    "ml": "milliliter",
    "yd": "yard",
    "lb": "pound",
    "lbs": "pound",
    "oz": "ounce",
    "mph": "mile/hour",
    "kmh": "kilometer/hour",
    "cents": "cent",
    "dollar": "dollar",
    "usd": "dollar",
    "deg": "degree",
    "rad": "radian",
    "sq": "square",
}
_GENERIC_UNITS = {"unit", "units", "square units", "sq units", "cubic units", "unit^2", "units^2", "u"}


def unit_key(unit: str) -> str | None:
    """Canonical unit text (``km`` = ``kilometers``), or None for a placeholder (``units``, ``square units``)."""
    u = re.sub(r"\s+", " ", unit.strip().lower().rstrip("."))
    if not u or u in _GENERIC_UNITS:
        return None
    u = re.sub(r"\s*\^\s*\{?\s*(-?\d)\s*\}?|(?<=[a-z])([23])\b", lambda m: "^" + (m.group(1) or m.group(2)), u)
    u = re.sub(r"\b(?:square|sq\.?)\s([a-z]+)", r"\1^2", re.sub(r"\bcubic\s([a-z]+)", r"\1^3", u))
    words = []
    for w in re.split(r"(\s+|/|\bper\b)", u):
        w = w.strip()
        if not w or w == "per":
            w = "/" if w == "per" else w
            if not w:
                continue
        w, power = (w.split("^", 1) + [""])[:2] if "^" in w else (w, "")
        w = _UNIT_ALIASES.get(w, w)
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = _UNIT_ALIASES.get(w[:-1], w[:-1])
        words.append(w + ("^" + power if power else ""))
    return " ".join(words).replace(" / ", "/")


def _strip_unit(s: str) -> tuple[str, bool, str]:
    """Drop a trailing unit after a number; ``5 million`` -> ``5 \\times 10^{6}``; ``5 percent`` -> percent.

    Returns (text, percent, unit words that were dropped or "").
    """
    m = _UNIT_WORD.match(s)
    if not m or re.search(r"[=<>]", s):
        return s, False, ""
    words = re.findall(r"[a-zA-Z]+", m.group(2))
    head, percent, scale = m.group(1).strip(), False, ""
    if words and words[0].lower() in _MULTIPLIERS:
        scale = f" \\times 10^{{{_MULTIPLIERS[words.pop(0).lower()]}}}"
    elif words and words[0].lower() in ("percent", "percentage", "pct"):
        words.pop(0)
        percent = True
    if words and not _unit_words_ok(words):
        return s, False, ""
    if not words and not (scale or percent):
        return s, False, ""
    if scale and not re.fullmatch(r"[+-]?\d[\d,]*(?:\.\d+)?", head):
        return s, False, ""  # "2\\sqrt{3} million": not a plain number to scale
    return head + scale, percent, m.group(2) if words else ""


_KNOWN_DOUBLED = re.compile(r"\\\\(?=(?:[dtc]?frac|sqrt|text|mathrm|left|right|cdot|times|pi|infty|le|ge|neq?|pm)(?![A-Za-z]))")


def _halve_backslashes(s: str) -> str:
    """JSON-escaped LaTeX (``\\\\frac{1}{2}``): when every command is written with two backslashes, halve them;
    in a mixture (``\\\\dfrac{1}{2} + \\frac{1}{72}``, part of a text escaped twice) halve the doubled
    common commands (a line break ``\\\\`` is never followed by one of these names in an answer)."""
    if re.search(r"\\\\[A-Za-z]", s) and not re.search(r"(?<!\\)\\[A-Za-z]", s):
        return re.sub(r"\\\\", r"\\", s)
    if "\\\\" in s and "\\begin" not in s:
        return _KNOWN_DOUBLED.sub(r"\\", s)
    return s


def _frac_args(s: str) -> str:
    """``\\frac52`` -> ``\\frac{5}{2}``, ``\\frac\\pi2`` -> ``\\frac{\\pi}{2}``: brace one-token arguments."""
    tok = r"(\{[^{}]*\}|\\[A-Za-z]+|[0-9A-Za-z])"
    return re.sub(
        r"\\frac\s*" + tok + r"\s*" + tok,
        lambda m: r"\frac" + "".join(g if g.startswith("{") else "{" + g + "}" for g in m.groups()),
        s,
    )


def normalize(text: str) -> tuple[str, bool]:
    """Normalize LaTeX presentation; return (text, had_percent). Degrees and units are dropped."""
    s, percent, _unit = normalize_with_unit(text)
    return s, percent


def normalize_with_unit(text: str) -> tuple[str, bool, str | None]:
    """``normalize`` that also returns the dropped unit (canonical, see ``unit_key``) or None."""
    s = _halve_backslashes(text.strip())
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    s = re.sub(r"^\$+|\$+$", "", s).strip()
    s = re.sub(r"^\\\(|\\\)$|^\\\[|\\\]$", "", s).strip()
    s = re.sub(r"(?<=\d),\s*\\!\s*(?=\d{3})", ",", s)  # "11,\\! 111": a thousands separator, not a list
    s = _SPACES_CMD.sub(" ", s).replace("~", " ")
    s = re.sub(r"\\[dtc]frac", r"\\frac", s)
    s = _frac_args(s)
    s = re.sub(r"(^|[(\[,{]|\\cup)\s*\+\s*\\infty", r"\1\\infty", s)  # "+\\infty" is "\\infty"
    s = re.sub(r"\\lbrace(?![a-zA-Z])", r"\\{", re.sub(r"\\rbrace(?![a-zA-Z])", r"\\}", s))
    s = re.sub(r"\\sqrt\s*([0-9a-zA-Z])(?![0-9])", r"\\sqrt{\1}", s)  # "\\sqrt2" = "\\sqrt{2}" (one token)
    s = re.sub(r"\{,\}", ",", s)
    s = re.sub(r":=|\\coloneqq(?![a-zA-Z])", "=", s)  # "x := 5" is the assignment "x = 5"
    s, marks = _DEGREE.subn("", s)
    unit = "degree" if marks else None  # only a radian unit on the other side differs (see math_compare)
    if marks and "\\pi" in s:
        raise ParseError(f"a degree mark on a multiple of \\pi mixes degrees and radians: {text[:60]!r}")
    m = _TEXT_UNIT.search(s)
    if m and _unit_words_ok(m.group(1).split()):  # "1.5 \\times 10^{3} \\text{ J}", "30\\text{C}"
        s, unit = s[: m.start()], unit_key(m.group(1) + (f"^{m.group(2)}" if m.group(2) else ""))
    prev = None
    while prev != s:  # unwrap nested \text{...}
        prev = s
        s = _WRAPPERS.sub(lambda m: m.group(1), s)
    s = _ORDINAL.sub("", s)  # "7^{\\text{th}}", "7th", "2^{nd}": an ordinal suffix is presentation (the number is the answer)
    if r"\$" in s:
        s, unit = s.replace(r"\$", ""), unit or "dollar"  # a dollar amount is not a percent (math_compare)
    if not re.search(r"\\begin\s*\{", s):  # matrix rows keep their "\\\\" separators
        s = s.replace("\\\\", " ")
    percent = False
    if re.search(r"\\?%\s*$", s):
        s, percent = re.sub(r"\\?%\s*$", "", s), True
    s = re.sub(r"\s+", " ", s).strip().rstrip(".。").strip()
    while s.startswith("{") and s.endswith("}") and _balanced(s[1:-1]):  # "{{2}}" is 2
        s = s[1:-1].strip()
    s, word_percent, word_unit = _strip_unit(s)
    if word_unit:
        unit = unit or unit_key(word_unit)
    if word_percent and percent:
        raise ParseError(f"two percent marks in {text!r}")
    percent = percent or word_percent
    if re.search(r"\\?%\s*$", s) and not percent:
        s, percent = re.sub(r"\\?%\s*$", "", s).strip(), True
    if re.fullmatch(r"\\(?:emptyset|varnothing)|\\\{\s*\\\}|\{\s*\}", s):
        s = r"\{\}"
    if re.fullmatch(r"\\mathbb\s*\{?\s*R\s*\}?|ℝ", s):  # the real line is the interval (-\\infty, \\infty)
        s = r"(-\infty, \infty)"
    return s, percent, unit


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
        parts.append(s[last : m.start()])
        last = m.end()
    parts.append(s[last:])
    return [p.strip() for p in parts]


_PROSE_WRAPPERS = re.compile(r"\\(?:text(?:bf|it|normal|rm)?|mathrm|mbox|emph)\s*\{|[{}$]|\\[,;!: ]|~")
_PROSE_CHARS = re.compile(r"[A-Za-z0-9\s,.;:'’!?()\-]+")
_CHOICE_LEAD = re.compile(r"\s*(?:\(\s*[A-Ja-j]\s*\)|[A-J]\s*[).:]|(?:option|choice)\s)", re.I)
_NOT_CONTENT = {"and", "or"}


def prose_key(text: str) -> str | None:
    """The comparison key of a prose answer (``\\text{No, it isn't possible.}`` -> ``no it is not possible``), or None.

    Prose: after ``\\text{}``-style wrappers and ``$`` are dropped, only letters, digits, spaces and
    sentence punctuation, with at least three words of two or more letters other than "and"/"or"
    (four when the text holds a digit: ``5 dollars and 3 cents`` stays a list of amounts) and one of
    three or more letters that is no function name (``xy yz zx`` is a product); never a list of short
    items (``Alice, Bob and Carol`` stays a list, in any order); never a choice (``(C) twelve apples``). The key is lowercase with ``n't``
    spelled ``not`` and punctuation as spaces, so two prose answers are equal when their words are.
    Linear time; the caller bounds the length (``math_parse.MAX_ANSWER_CHARS``).
    """
    s = _PROSE_WRAPPERS.sub(" ", text)
    if not _PROSE_CHARS.fullmatch(s) or _CHOICE_LEAD.match(s):
        return None
    items = [i for i in re.split(r",|;|\band\b|\bor\b", s) if i.strip()]
    if len(items) > 1 and all(len(i.split()) <= 2 for i in items):
        return None  # "Alice, Bob and Carol": a list of names, compared as a list (any order)
    words = [w for w in re.findall(r"[A-Za-z]{2,}", s) if w.lower() not in _NOT_CONTENT]
    need = 4 if any(c.isdigit() for c in s) else 3
    if len(words) < need or not any(len(w) >= 3 and w.lower() not in KNOWN_FUNCS for w in words):
        return None
    s = re.sub(r"n[’']t\b", " not", s.lower().replace("can't", "can not").replace("won't", "will not"))
    return " ".join(re.sub(r"[,.;:!?()'’\-]", " ", s).split())
