"""Stage 2 of math verification: decide whether a parsed prediction equals a parsed gold answer.

``compare`` runs without any computer algebra. When a leaf pair needs one (an ``expression`` on
either side) and no CAS callback is given it raises ``NeedsCAS``; the caller then re-runs the same
comparison inside a killable worker process that passes ``ratchet.verifiers.math.comparison.symbolic.cas_equal``.
Keeping one comparison function for both paths means the fast path and the slow path can never
disagree about policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

from ratchet.verifiers.math.parsing.parse import _GREEK, _SYMBOL, Answer

Cas = Callable[[Answer, Answer, "Fraction | None"], bool]

_NUMBER = ("integer", "rational", "decimal")
FLOAT_DIGITS = 10  # a decimal with this many significant digits is a float rendering, not a rounding
_MULTI = ("set", "list", "union")


class NeedsCAS(Exception):
    """A leaf comparison needs sympy; re-run in the worker pool."""


def sig_digits(a: Answer) -> int:
    """Significant digits written in a decimal answer (``"0.33"`` -> 2, ``"2.72"`` -> 3)."""
    digits = "".join(c for c in a.text if c.isdigit()).lstrip("0")
    return len(digits)


def tolerance(gold: Answer, pred: Answer) -> Fraction | None:
    """Absolute tolerance allowed between ``pred`` and ``gold``, or None for exact comparison.

    Policy: tolerance is half a unit in the last written place of the gold, and only when
      * the gold is marked approximate (``≈``, ``约为``, ``approximately``, ``about``), or
      * the gold is an unmarked decimal and the prediction is an exact value that has no
        terminating decimal (``\\frac13`` for ``0.33``, ``\\sqrt{2}`` for ``1.41``): such a pair can
        never be exactly equal, so the gold must be a rounding.
    An unmarked decimal gold against a longer decimal (``82.01`` for ``82.0``) is compared
    exactly: the gold may well be exact, and accepting would be a false positive. A coarser
    prediction (``3.1`` for ``3.14``) or a decimal against an exact gold (``3.14`` for ``\\pi``) is
    never accepted. There are no ``gold*100`` or ``gold/100`` heuristics.

    A prediction printed like a float (``FLOAT_DIGITS`` or more significant digits, ``0.0833333333333333``)
    against an exact gold with no terminating decimal (``\\frac{1}{12}``) gets half a unit of the
    prediction's own last place: it is that value to every digit written (``3.14159`` for ``\\pi``
    or ``0.083`` for ``\\frac1{12}`` are not).
    """
    if gold.kind not in _NUMBER:
        return None
    if gold.kind == "rational" and not _terminates(gold.value) and pred.kind == "decimal" and sig_digits(pred) >= FLOAT_DIGITS:  # type: ignore[arg-type]
        return Fraction(1, 2) / Fraction(10) ** pred.places  # "0.0833333333333333" is 1/12 printed as a float
    half = Fraction(1, 2) / Fraction(10) ** gold.places
    if gold.approx:
        return half
    if gold.kind != "decimal" or pred.percent is not None:
        return None
    if pred.kind == "rational" and not _terminates(pred.value):  # type: ignore[arg-type]
        return half
    if pred.kind == "expression":  # the CAS side only applies it to constants that are not exactly equal
        return half
    return None


def _terminates(q: Fraction) -> bool:
    d = q.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _num_eq(gold: Answer, pred: Answer) -> bool:
    """Exact equality with the percent policy (``50%`` = ``0.5`` = ``50``), then the tolerance policy."""
    if gold.percent is not None and pred.percent is not None:  # both written with %: the values must agree
        gvals, pvals = [gold.value], [pred.value]
    else:  # lists, not sets: hashing a Fraction costs a modular inverse of its denominator
        gvals = [gold.value] + ([gold.percent] if gold.percent is not None else [])
        pvals = [pred.value] + ([pred.percent] if pred.percent is not None else [])
    if any(g == p for g in gvals for p in pvals):
        return True
    tol = tolerance(gold, pred)
    if tol is None:
        return False
    return any(abs(p - g) <= tol for g in gvals for p in pvals)  # type: ignore[operator]


def _is_symbol(lhs: str) -> bool:
    """A relation's left side that is just a name (``x``, ``y_1``, ``\\theta``, ``f(x)``)."""
    return bool(re.fullmatch(_SYMBOL + r"(?:\([a-z]\))?", lhs))  # a Greek letter, not "\\lim" or "\\sin"


_NAME = r"(?:[A-Za-z]{1,4}|\\(?:" + _GREEK + r"))(?:_\{?[A-Za-z0-9]+\}?)?"
_LABEL = re.compile(
    r"(?:m?\\angle|\\overline|\\triangle)?\{?" + _NAME + r"\}?(?:\([A-Za-z0-9]{1,3}\))?"  # AB, \\angle ABC, f(2)
    r"|(?:[A-Za-z](?:\^\{?-1\}?)?\(){1,3}[A-Za-z0-9]{1,3}\){1,3}"  # g(g(3)), f(f(f(1))), f^{-1}(3): a function applied (balanced: _is_label)
    r"|\(" + _NAME + r"(?:," + _NAME + r")+\)"  # (a, b)
    r"|\|" + _NAME + r"\||\\[lv]?vert" + _NAME + r"\\[rv]?vert"  # |AB|
    r"|\\frac\{" + _NAME + r"\}\{" + _NAME + r"\}"  # \\frac{NO}{BO}
    r"|" + _NAME + r"(?::" + _NAME + r")+"  # S_{ABC}:S, A:B (a ratio's name)
)


def _is_label(lhs: str) -> bool:
    """A relation's left side that names the value on its right (``x``, ``(a, b)``, ``|AB|``, ``\\frac{NO}{BO}``, ``f(2)``).

    A label holds no operator, so ``x + y = 5`` (an equation) is never read as the value ``5``.
    """
    lhs = lhs.replace(" ", "")
    return lhs.count("(") == lhs.count(")") and bool(_LABEL.fullmatch(lhs))


def _match_all(gold: tuple, pred: tuple, cas: Cas | None) -> bool:
    """Unordered matching: every gold item is matched by a distinct prediction item, and vice versa."""
    gold = tuple({a.canonical(): a for a in gold}.values())  # a list of solutions names each one once
    pred = tuple({a.canonical(): a for a in pred}.values())
    if len(gold) != len(pred):
        return False
    left = list(pred)
    for g in gold:
        for i, p in enumerate(left):
            if leaf_equal(g, p, cas):
                del left[i]
                break
        else:
            return False
    return True


# truth values: a True/False gold is answered Yes/No as often as True/False (TheoremQA, logic tasks)
_TRUTH = {"true": True, "yes": True, "false": False, "no": False}
_INF = {r"\infty": 1, r"+\infty": 1, r"-\infty": -1}


def _same_text(gold: Answer, pred: Answer) -> bool:
    """Identical normalized LaTeX (``\\infty`` = ``\\infty``: sympy's ``oo - oo`` is nan, never zero)."""
    return gold.kind == pred.kind == "expression" and str(gold.value).replace(" ", "") == str(pred.value).replace(" ", "")


def _as_interval(a: Answer) -> tuple | None:
    """An interval, a round-bracket pair, or a one-sided inequality on a name (``x \\le 2``) as an interval."""
    if a.kind == "interval":
        return a.value  # type: ignore[return-value]
    if a.kind == "tuple" and a.parens:
        return (False, *a.value, False)  # type: ignore[misc]
    if a.kind == "relation":
        lhs, op, rhs = a.value  # type: ignore[misc]
        if not _is_symbol(lhs) or op not in ("<", "<=", ">", ">="):
            return None
        inf, ninf = Answer("expression", r"\infty"), Answer("expression", r"-\infty")
        return (False, ninf, rhs, op == "<=") if op in ("<", "<=") else (op == ">=", rhs, inf, False)
    return None


def _named_tuple(a: Answer) -> tuple[list[str], Answer] | None:
    """``(a, b) = (4, 1)`` as (["a", "b"], the tuple (4, 1)); None for anything else."""
    if a.kind != "relation" or a.value[1] != "=" or a.value[2].kind != "tuple":  # type: ignore[index]
        return None
    m = re.fullmatch(r"\((.+)\)", a.value[0])  # type: ignore[index]
    names = m.group(1).split(",") if m else []
    if not names or not all(re.fullmatch(_SYMBOL, n) for n in names) or len(names) != len(a.value[2].value):  # type: ignore[index]
        return None
    return names, a.value[2]  # type: ignore[index]


_COMMA_DECIMAL = re.compile(r"\$*\s*([+-]?\d+),(\d{1,2}|(?<=0,)\d+)\s*\$*")


def _decimal_comma(a: Answer) -> Answer | None:
    """``1000,99`` / ``0,111`` written with a decimal comma, as the decimal; None for anything else.

    Only a comma with no space after it and one or two digits (or a leading ``0,``) reads as a decimal
    comma: ``1,000`` is a thousands separator and ``1, 2`` a list.
    """
    if a.kind != "list" or len(a.value) != 2:  # type: ignore[arg-type]
        return None
    m = _COMMA_DECIMAL.fullmatch(a.text.strip())
    if not m:
        return None
    value = Fraction(f"{m.group(1)}.{m.group(2)}")
    return Answer("decimal", value, places=len(m.group(2)), text=f"{m.group(1)}.{m.group(2)}")


def _interval_vs_inequality(gold: Answer, pred: Answer) -> bool:
    """One side an inequality on a name (``x < 4``), the other a round-bracket pair (``(-\\infty, 4)``)."""
    kinds = {gold.kind, pred.kind}
    return kinds == {"relation", "tuple"} and _as_interval(gold) is not None and _as_interval(pred) is not None


def _assignments(a: Answer) -> tuple | None:
    """``x = 3, y = 4`` as the ordered values ``(3, 4)`` (distinct single names only)."""
    if a.kind != "list" or a.hedged:
        return None
    items = a.value  # type: ignore[union-attr]
    if not all(i.kind == "relation" and i.value[1] == "=" and _is_symbol(i.value[0]) for i in items):
        return None
    if len({i.value[0] for i in items}) != len(items):
        return None
    return tuple(i.value[2] for i in items)


def _relation_equal(gold: Answer, pred: Answer, cas: Cas | None) -> bool:
    """A relation against a value (``x = 3`` / ``|AB| = 1`` for ``3`` / ``1``) or against another relation.

    Raises:
        NeedsCAS: two relations whose equality needs sympy and ``cas`` is None.
    """
    if gold.kind != "relation":
        lhs, op, rhs = pred.value  # type: ignore[misc]
        return op == "=" and _is_label(lhs) and leaf_equal(gold, rhs, cas)
    if pred.kind != "relation":
        lhs, op, rhs = gold.value  # type: ignore[misc]
        return op == "=" and _is_label(lhs) and leaf_equal(rhs, pred, cas)
    (gl, gop, gr), (pl, pop, pr) = gold.value, pred.value  # type: ignore[misc]
    if gl == pl and gop == pop and leaf_equal(gr, pr, cas):
        return True
    if gop == pop == "=" and _is_label(gl) and _is_label(pl) and not (_is_symbol(gl) and _is_symbol(pl)):
        return gl == pl and leaf_equal(gr, pr, cas)  # "|AB| = 1": labelled values, not equations
    if cas is None:
        raise NeedsCAS("relation")
    return cas(gold, pred, None)


def _units_differ(gold: Answer, pred: Answer) -> bool:
    """Both sides carry units and they differ; a percent against a unit (a dollar amount) differs too.

    A degree mark is presentation against any unit but a radian (``30^\\circ`` = ``30^\\circ C``).
    """
    if (gold.percent is None) != (pred.percent is None) and (gold.unit or pred.unit):
        return True
    if not (gold.unit and pred.unit) or gold.unit == pred.unit:
        return False
    return "degree" not in (gold.unit, pred.unit) or "radian" in (gold.unit, pred.unit)


def leaf_equal(gold: Answer, pred: Answer, cas: Cas | None) -> bool:
    """Equality of two parsed answers of any kind (see ``compare`` for the top-level rules).

    Raises:
        NeedsCAS: an expression is involved and ``cas`` is None.
    """
    gk, pk = gold.kind, pred.kind
    if _units_differ(gold, pred):  # "8 kg" is not "8 g", "\\$8" is not "8\\%", "30^\\circ" is not "30 rad"
        return False
    if gk in _NUMBER and pk in _NUMBER:
        return _num_eq(gold, pred)
    if _same_text(gold, pred):
        return True
    if gk == "choice" and pk != "choice" and gold.content is not None:  # "(C) 12": the option text counts
        return leaf_equal(gold.content, pred, cas)
    if pk == "choice" and gk != "choice" and pred.content is not None:
        return leaf_equal(gold, pred.content, cas)
    if gk == "tuple" and _assignments(pred) is not None:  # "x = 3, y = 4" for (3, 4)
        vals = _assignments(pred)
        return len(vals) == len(gold.value) and all(leaf_equal(a, b, cas) for a, b in zip(gold.value, vals))  # type: ignore
    if pk == "tuple" and _assignments(gold) is not None:  # gold "k = 45, n = 2" names the tuple (45, 2)
        vals = _assignments(gold)
        return len(vals) == len(pred.value) and all(leaf_equal(a, b, cas) for a, b in zip(vals, pred.value))  # type: ignore
    if gk == "interval" or pk == "interval" or _interval_vs_inequality(gold, pred):
        g, p = _as_interval(gold), _as_interval(pred)
        if g is None or p is None:
            return False
        return g[0] == p[0] and g[3] == p[3] and leaf_equal(g[1], p[1], cas) and leaf_equal(g[2], p[2], cas)
    if "relation" in (gk, pk):
        return _relation_equal(gold, pred, cas)
    if gk == "choice":
        return (
            pk == "choice"
            and pred.value == gold.value
            or (pk == "expression" and str(pred.value).upper() == gold.value and len(str(pred.value)) == 1)
        )
    if gk == "text" or pk == "text":
        if gk == pk and gold.value in _TRUTH and pred.value in _TRUTH:  # "Yes" for the gold "True": one truth value
            return _TRUTH[gold.value] == _TRUTH[pred.value]  # type: ignore[index]
        return gk == pk and gold.value == pred.value
    if gk in _MULTI and pk in _MULTI:
        return _match_all(gold.value, pred.value, cas)  # type: ignore[arg-type]
    if gk in ("list", "set") and pk == "tuple" and not gold.hedged and not pred.parens:  # "(1, 3, 5)" lists "1, 3, 5"
        return _match_all(gold.value, pred.value, cas)  # type: ignore[arg-type]
    if gk in ("tuple", "matrix", "ratio") and pk == gk:
        g, p = gold.value, pred.value
        return len(g) == len(p) and all(leaf_equal(a, b, cas) for a, b in zip(g, p))  # type: ignore[arg-type]
    if gk == "expression" or pk == "expression":
        if pk not in _NUMBER + ("expression",) or gk not in _NUMBER + ("expression",):
            return False
        if cas is None:
            raise NeedsCAS("expression")
        return cas(gold, pred, tolerance(gold, pred))
    return False


def compare(gold: Answer, pred: Answer, cas: Cas | None = None) -> str:
    """Judge a parsed prediction against a parsed gold.

    Rules beyond ``leaf_equal``:
      * a gold listing several answers (``1331 and 1728``) needs all of them, in any order;
      * a single gold against a prediction listing several different candidates (``B, A``,
        ``12 or 15``) is ``"ambiguous"`` when one candidate matches, ``"wrong"`` otherwise.

    Returns:
        ``"ok"``, ``"wrong"`` or ``"ambiguous"``.

    Raises:
        NeedsCAS: see ``leaf_equal``.
    """
    if pred.kind == "list" and gold.kind == "tuple" and _assignments(pred) is not None:
        return "ok" if leaf_equal(gold, pred, cas) else "wrong"
    if (
        pred.kind == "list"
        and gold.kind == "tuple"
        and not gold.parens
        and not pred.hedged
        and len(pred.value) == len(gold.value)
    ):  # type: ignore[arg-type]
        ok = all(leaf_equal(a, b, cas) for a, b in zip(gold.value, pred.value))  # type: ignore[arg-type]
        return "ok" if ok else "wrong"  # "1, 3, 5" (or "{1,3,5}": TeX grouping) is the tuple (1, 3, 5) without brackets, in order
    named = _named_tuple(gold)
    if named is not None and _assignments(pred) is not None:  # gold "(a, b) = (4, 1)", pred "a = 4, b = 1"
        names, values = named
        given = {i.value[0]: i.value[2] for i in pred.value}  # type: ignore[union-attr]
        ok = set(given) == set(names) and all(leaf_equal(v, given[n], cas) for n, v in zip(names, values.value))  # type: ignore[arg-type]
        return "ok" if ok else "wrong"
    comma_g, comma_p = _decimal_comma(gold), _decimal_comma(pred)
    if (comma_g or comma_p) and (comma_g or gold).kind in _NUMBER and (comma_p or pred).kind in _NUMBER:
        return "ok" if leaf_equal(comma_g or gold, comma_p or pred, cas) else "wrong"
    if pred.kind == "list" and gold.kind not in _MULTI:
        items = pred.value
        if len({i.canonical() for i in items}) > 1:  # type: ignore[attr-defined]
            return "ambiguous" if any(leaf_equal(gold, i, cas) for i in items) else "wrong"  # type: ignore[attr-defined]
        pred = items[0]  # type: ignore[index]
    if pred.kind == "list" and pred.hedged and gold.kind == "list" and not gold.hedged:
        pass  # "2 or 3" for the gold "2 and 3" lists the same solutions
    return "ok" if leaf_equal(gold, pred, cas) else "wrong"
