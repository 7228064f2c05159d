"""The slow path of math verification: sympy equivalence, run only inside a worker process.

Never imported by the caller's process except for ``main`` bookkeeping: ``verifiers.math`` starts
``python -c "from ratchet.verifiers.math.comparison.symbolic import main; main()"`` workers through
``ratchet.verifiers._pool.WorkerPool`` and kills them on a hard timeout. LaTeX is read with
``latex2sympy2_extended`` (an ANTLR grammar); a parse that does not consume the whole answer
raises, and that is a parse failure, never a fallback to a fragment. Nothing here evaluates model
text as Python.
"""

from __future__ import annotations

import functools
import math
import resource
from fractions import Fraction
from typing import Any

from ratchet.verifiers.math.comparison.compare import NeedsCAS, _terminates, compare
from ratchet.verifiers.math.parsing.parse import Answer, ParseError, TooLarge, parse_answer

WORKER_MEMORY_BYTES = 2 * 1024**3  # a runaway simplify dies with MemoryError instead of swapping the host
MAX_POW_EXPONENT = 10_000  # 2^{10000} is fine; 9^{387420489} is not


class SideError(Exception):
    """Converting one side to sympy failed; ``side`` says which ("gold" or "pred")."""

    def __init__(self, side: str, message: str, reason: str = "parse_error") -> None:
        super().__init__(message)
        self.side, self.reason = side, reason


def _config() -> Any:
    """latex2sympy settings: symbols keep their case (``X`` is not ``x``; the default lowercases them)."""
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig

    return ConversionConfig(lowercase_symbols=False)


@functools.lru_cache(maxsize=2048)
def _latex(text: str) -> Any:
    """latex2sympy of one normalized LaTeX text (cached: a gold is compared with many completions)."""
    from latex2sympy2_extended import latex2sympy

    return latex2sympy(text, conversion_config=_config())


def _to_sympy(a: Answer, side: str) -> Any:
    import sympy

    if a.kind in ("integer", "rational", "decimal"):
        v = a.value
        assert isinstance(v, Fraction)
        return sympy.Rational(v.numerator, v.denominator)
    if a.kind == "relation":
        lhs, op, rhs = a.value  # type: ignore[misc]
        left = _to_sympy(parse_answer(lhs, _inner=True), side)
        right = _to_sympy(rhs, side)
        return (op, left - right)
    if a.kind != "expression":
        raise SideError(side, f"cannot convert {a.kind} to sympy")
    try:
        expr = _latex(str(a.value))
    except Exception as exc:  # the ANTLR parser raises bare Exception subclasses; record the text
        raise SideError(side, f"latex parse failed: {str(exc).splitlines()[0][:200]}") from None
    floats = expr.atoms(sympy.Float) if hasattr(expr, "atoms") else set()
    if floats:  # a written decimal is exact: 10.5 is 21/2 (so 10\\sqrt{10.5} = 5\\sqrt{42})
        expr = expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and node.exp.is_Number and abs(node.exp) > MAX_POW_EXPONENT:
            raise SideError(side, f"exponent {node.exp} above {MAX_POW_EXPONENT}", "timeout")
    if a.percent is not None:
        expr = expr / 100
    return expr


def _close(a: Any, b: Any, tol: Fraction) -> bool:
    import sympy

    if a.free_symbols or b.free_symbols:
        return False
    diff = sympy.N(a - b, 40)
    if not diff.is_number or diff.has(sympy.I) and sympy.im(diff) != 0:
        return False
    return bool(abs(diff) <= sympy.Rational(tol.numerator, tol.denominator))


_PROBES = ((13, 7), (29, 11), (5, 3))  # rational points where a nonzero difference shows numerically


def _numerically_nonzero(d: Any) -> bool:
    """True only when ``d`` is surely not identically zero: its value at a probe point (or, for a
    constant, its value) is far from zero relative to the size of its terms. False means "unknown".

    This screen lets a wrong answer skip ``simplify`` (tens to hundreds of milliseconds); equality is
    still decided exactly by ``simplify``/``equals``.
    """
    import sympy

    syms = sorted(d.free_symbols, key=str)
    points = [{}] if not syms else [{s: sympy.Rational(a + 2 * i, b + i) for i, s in enumerate(syms)} for a, b in _PROBES]
    for point in points:
        try:
            terms = sympy.Add.make_args(d.subs(point) if point else d)
            vals = [complex(sympy.N(t, 30)) for t in terms]
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            return False
        total, scale = abs(sum(vals)), sum(abs(v) for v in vals)
        if math.isfinite(total) and math.isfinite(scale) and total > 1e-9 * scale and total > 1e-30:
            return True
    return False


def _zero(d: Any) -> bool:
    import sympy

    if d == 0:
        return True
    if _numerically_nonzero(d):
        return False
    if sympy.expand(d) == 0 or sympy.simplify(d) == 0:
        return True
    return bool(d.equals(0))


def _same_solutions(gop: str, gd: Any, pop: str, pd: Any, mirror: dict[str, str]) -> bool:
    """``lhs - rhs`` of two relations differ by a constant factor: same solution set (``2y = 4x + 2`` = ``y = 2x + 1``).

    A negative factor flips an inequality (``x < 4`` = ``-x > -4``).
    """
    import sympy

    if pd == 0 or not (gd.free_symbols and pd.free_symbols):
        return False
    if _numerically_nonzero(gd / pd - (gd / pd).subs({s: s + 1 for s in gd.free_symbols | pd.free_symbols})):
        return False  # the ratio changes with the variables: not a constant factor
    ratio = sympy.cancel(gd / pd)  # polynomial sides: a constant without simplify
    if not ratio.is_number:
        ratio = sympy.simplify(ratio)
    if not ratio.is_number or ratio == 0 or not ratio.is_finite or not ratio.is_real:
        return False
    if gop in ("=", "!="):
        return gop == pop
    return gop == pop if ratio > 0 else mirror[gop] == pop


def cas_equal(gold: Answer, pred: Answer, tol: Fraction | None) -> bool:
    """Sympy equivalence of two leaves (expressions, numbers, relations).

    Args:
        tol: absolute tolerance from ``math_compare.tolerance``; None means exact.

    Raises:
        SideError: one side could not be converted.
    """
    g = _to_sympy(gold, "gold")
    p = _to_sympy(pred, "pred")
    if isinstance(g, tuple) or isinstance(p, tuple):
        if not (isinstance(g, tuple) and isinstance(p, tuple)):
            return False
        (gop, gd), (pop, pd) = g, p
        mirror = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}
        if gop == pop and _zero(gd - pd):
            return True
        if mirror[gop] == pop and _zero(gd + pd):
            return True
        return _same_solutions(gop, gd, pop, pd, mirror)
    if hasattr(g, "is_Relational") and (g.is_Relational or p.is_Relational):
        return False
    pv = p.doit() if hasattr(p, "doit") else p  # latex2sympy may leave "82 + 1/100" unevaluated
    exact_decimal = getattr(pv, "is_Rational", False) and _terminates(Fraction(int(pv.p), int(pv.q)))
    if tol is not None and not exact_decimal and _close(g, p, tol):  # a terminating value must match exactly
        return True
    if _canonical(g) == _canonical(p):  # the same expression written in another order: no simplify needed
        return True
    return _zero(g - p)


def _canonical(e: Any, depth: int = 0) -> Any:
    """``e`` rebuilt bottom-up with sympy's automatic evaluation (latex2sympy leaves terms in written order).

    Only canonical ordering and trivial folding happen (no ``simplify``); nesting deeper than 64 is
    returned as is (the caller then falls back to ``_zero``).
    """
    if not getattr(e, "args", ()) or depth > 64:
        return e
    try:
        return e.func(*[_canonical(a, depth + 1) for a in e.args])
    except (TypeError, ValueError, AttributeError):
        return e


def judge(gold_text: str, pred_text: str) -> dict[str, Any]:
    """Parse both texts and compare with sympy; return ``{"reason": ..., "error": ...}``."""
    try:
        gold = parse_answer(gold_text)
    except ParseError as exc:
        return {"reason": "bad_gold", "error": str(exc)}
    try:
        pred = parse_answer(pred_text)
    except TooLarge as exc:
        return {"reason": "timeout", "error": str(exc)}
    except ParseError as exc:
        return {"reason": "parse_error", "error": str(exc)}
    try:
        return {"reason": compare(gold, pred, cas_equal)}
    except SideError as exc:
        reason = "bad_gold" if exc.side == "gold" else exc.reason
        return {"reason": reason, "error": str(exc)}
    except NeedsCAS as exc:  # cannot happen with a CAS given; keep the failure visible
        return {"reason": "parse_error", "error": f"internal: {exc}"}
    except (TypeError, ValueError, AttributeError, RecursionError, MemoryError, ZeroDivisionError) as exc:
        # sympy raises these on degenerate inputs (e.g. comparing a set with a number)
        return {"reason": "parse_error", "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


_WARMUP = (  # one of each common answer shape, parsed at worker start (ANTLR caches predictions per token shape)
    r"\frac{\sqrt{3}}{2}",
    r"2\sqrt{3}+\sqrt[3]{2}",
    r"\frac{5\pi}{2}-\pi/4",
    r"e^{2}+e^x-\ln(2)+\ln 3+\log_{2} 8",
    r"\sin(x)+\cos^2 x+\tan\theta",
    r"(x+1)^2-x^{2}\cdot 3\times 2",
    r"\binom{9}{2}+5!-|x|",
    r"-\frac{-1+\sqrt{5}}{2}",
    r"\infty",
    r"2^{10}-10^6",
    r"ab+xy-a_1+b_{2}",
    r"\sqrt{7}",
    r"3\sqrt{7}",
    r"\frac{2\sqrt{5}}{3}",
    r"\frac{\pi}{6}",
    r"\pi/3",
    r"3\pi",
    r"\frac{7}{3}\pi",
    r"1.5\pi",
    r"e^3",
    r"3e",
    r"\ln(5)",
    r"\ln 5",
    r"7!",
    r"\binom{6}{3}",
    r"a^2-3a+2",
    r"2+3a+a^2",
    r"(a+2)^3",
    r"3x+2y-5",
    r"x",
    r"-\frac{2}{7}",
    r"\frac{1-\sqrt{3}}{4}",
    r"10^{3}",
    r"2.71",
    r"4x^{3}(1+2x^{3})-2x^2(x-1)(x+1)",  # factored polynomials
    r"\sec^2(x)+\csc^2 y-\cot^2(z)",  # reciprocal trigonometric functions
    r"\frac{\sqrt{\sqrt{3}+1}}{5+2\sqrt{6}}",  # nested radicals
    r"2x-3y+4z-1=0",  # an equation in several names
    r"1-\frac{1}{\mathrm{e}}",
)


def warm_up() -> None:
    """Pay sympy's and the LaTeX parser's first-use costs before the first request (worker start)."""
    import sympy
    from latex2sympy2_extended import latex2sympy

    for text in _WARMUP:  # ANTLR fills its prediction cache per construct: the first parse of each is slow
        _latex(text)
    x = sympy.Symbol("x")
    sympy.simplify(latex2sympy("\\sqrt{12}+x") - 2 * sympy.sqrt(3) - x)  # simplify's lazy imports
    sympy.simplify(sympy.cot(x) ** 2 + 1 - sympy.csc(x) ** 2)  # ... and its trigonometric ones (~0.3 s cold)
    sympy.cancel((2 * x + 4) / (x + 2))  # the constant-ratio test of two equations
    _canonical(sympy.Mul(3, sympy.Add(x, 2, evaluate=False), evaluate=False))  # the rebuild's first use


def main() -> None:
    """Worker loop: one JSON request per stdin line -> one JSON reply per stdout line."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    warm_up()
    from ratchet.verifiers._pool import serve_json_lines

    serve_json_lines(judge)


if __name__ == "__main__":
    main()
