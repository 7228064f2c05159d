"""Matrix arithmetic in a final answer: ``A + B``, ``A - B``, ``2A``, ``A B``, ``A \\cdot B`` with numeric entries.

A model sometimes answers with the computation rather than its result (``\\begin{pmatrix}1 & 2 \\\\ 3 & 4
\\end{pmatrix} + \\begin{pmatrix}5 & 6 \\\\ 7 & 8\\end{pmatrix}``); the answer is the evaluated matrix,
compared entry by entry like any matrix. Entries must be numbers (exact ``Fraction`` arithmetic, no
computer algebra); anything else (symbolic entries, a determinant bar, mismatched shapes) is not read
here and stays a parse error. Pure string work, linear in the text; sizes are bounded (``MAX_CELLS``)
so a product cannot blow up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

Matrix = list[list[Fraction]]

MAX_CELLS = 400  # entries per matrix (20 x 20); larger "answers" are not hand-written results
MAX_FACTORS = 16  # matrices and scalars in one answer

_BLOCK = re.compile(r"\\begin\{([pbB]?matrix|array)\}(?:\{[^{}]*\})?(.*?)\\end\{\1\}", re.S)
_WRAP = re.compile(r"\\left\s*[(\[]\s*(@\d+)\s*\\right\s*[)\]]|[(\[]\s*(@\d+)\s*[)\]]")
_TOKEN = re.compile(r"\s*(?:(@\d+)|(\d+(?:\.\d+)?|\\frac\{\d+\}\{\d+\})|(\\cdot|\\times|\*)|([+-]))")


def _cells(body: str, cell: Callable[[str], Fraction | None]) -> Matrix | None:
    rows = [r for r in re.split(r"\\\\", body) if r.strip()]
    out = [[cell(c) for c in r.split("&")] for r in rows]
    if not out or len({len(r) for r in out}) != 1 or len(out) * len(out[0]) > MAX_CELLS:
        return None
    if any(v is None for r in out for v in r):
        return None
    return out  # type: ignore[return-value]


def _mul(a: Matrix, b: Matrix) -> Matrix | None:
    if len(a[0]) != len(b) or len(a) * len(b[0]) > MAX_CELLS:
        return None
    return [[sum((a[i][k] * b[k][j] for k in range(len(b))), Fraction(0)) for j in range(len(b[0]))] for i in range(len(a))]


def _scale(m: Matrix, c: Fraction) -> Matrix:
    return [[c * v for v in row] for row in m]


def _add(a: Matrix, b: Matrix) -> Matrix | None:
    if len(a) != len(b) or len(a[0]) != len(b[0]):
        return None
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def evaluate(text: str, cell: Callable[[str], Fraction | None]) -> Matrix | None:
    """The matrix an arithmetic expression of matrices with numeric entries evaluates to, or None.

    Args:
        text: a normalized answer holding at least one ``\\begin{pmatrix}`` (``bmatrix``, ``Bmatrix``,
            ``matrix``, ``array``) block and, around the blocks, only ``+``, ``-``, ``\\cdot``,
            ``\\times``, juxtaposition and numeric scalars.
        cell: parses one entry to an exact number, or None when it is not one.

    Returns:
        Rows of exact entries, or None (not matrix arithmetic, a non-numeric entry, shapes that do
        not conform, more than ``MAX_FACTORS`` factors or ``MAX_CELLS`` entries).
    """
    blocks: list[Matrix] = []

    def hold(m: re.Match[str]) -> str:
        blocks.append(_cells(m.group(2), cell) or [])
        return f"@{len(blocks) - 1}"

    skeleton = _WRAP.sub(lambda m: m.group(1) or m.group(2), _BLOCK.sub(hold, text))
    if not blocks or len(blocks) > MAX_FACTORS or any(not b for b in blocks):
        return None
    terms: list[tuple[int, list[object]]] = []  # (sign, factors)
    sign, factors, pos = 1, [], 0
    skeleton = skeleton.strip()
    while pos < len(skeleton):
        m = _TOKEN.match(skeleton, pos)
        if m is None:
            return None
        pos = m.end()
        if m.group(4):
            op_sign = -1 if m.group(4) == "-" else 1
            if factors:  # "A - B": the sign opens the next term
                terms.append((sign, factors))
                factors, sign = [], op_sign
            else:  # "-A", "A + -B"
                sign *= op_sign
        elif m.group(1):
            factors.append(blocks[int(m.group(1)[1:])])
        elif m.group(2):
            factors.append(cell(m.group(2)))
        if len(factors) > MAX_FACTORS:
            return None
    if factors:
        terms.append((sign, factors))
    total: Matrix | None = None
    for sgn, fs in terms:
        value = _term(fs)
        if value is None:
            return None
        value = _scale(value, Fraction(sgn))
        total = value if total is None else _add(total, value)
        if total is None:
            return None
    return total


def _term(factors: list[object]) -> Matrix | None:
    """Product of scalars and matrices, left to right; None unless it holds a matrix and shapes conform."""
    scalar, mat = Fraction(1), None
    for f in factors:
        if isinstance(f, Fraction):
            scalar *= f
        elif isinstance(f, list):
            mat = f if mat is None else _mul(mat, f)
            if mat is None:
                return None
        else:
            return None
    return None if mat is None else _scale(mat, scalar)
