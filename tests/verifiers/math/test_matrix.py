"""``verifiers.math_matrix.evaluate``: exact matrix arithmetic, and None for anything it does not read."""

from fractions import Fraction

import pytest

from ratchet.verifiers.math.parsing.matrix import MAX_CELLS, evaluate


def _num(cell: str) -> Fraction | None:
    try:
        return Fraction(cell.strip())
    except ValueError:
        return None


def M(*rows: str) -> str:  # noqa: N802 (reads like the matrix it builds)
    return r"\begin{pmatrix}" + r" \\ ".join(rows) + r"\end{pmatrix}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (M("1 & 2", "3 & 4") + " + " + M("5 & 6", "7 & 8"), [[6, 8], [10, 12]]),
        (M("1 & 2", "3 & 4") + " - " + M("5 & 6", "7 & 8"), [[-4, -4], [-4, -4]]),
        ("-" + M("1 & 2", "3 & 4"), [[-1, -2], [-3, -4]]),
        ("2" + M("1 & 2", "3 & 4") + r" \cdot " + M("0 & 1", "1 & 0"), [[4, 2], [8, 6]]),  # 2 (A B)
        (M("1 & 2") + " " + M("3", "4"), [[11]]),  # (1x2)(2x1)
        (r"\left[" + M("1 & 0", "0 & 1") + r"\right] + " + M("1 & 1", "1 & 1"), [[2, 1], [1, 2]]),
    ],
)
def test_evaluates_exactly(text: str, expected: list[list[int]]) -> None:
    assert evaluate(text, _num) == [[Fraction(v) for v in row] for row in expected]


@pytest.mark.parametrize(
    "text",
    [
        M("1 & 2") + " + " + M("3", "4"),  # shapes do not conform
        M("1 & 2", "3 & 4") + " " + M("1 & 2 & 3"),  # (2x2)(1x3)
        M("a & 2", "3 & 4") + " + " + M("5 & 6", "7 & 8"),  # a symbolic entry
        M("1 & 2", "3 & 4") + "^2",  # powers are not evaluated
        M("1 & 2", "3") + " + " + M("1 & 2", "3 & 4"),  # ragged rows
        "x + " + M("1 & 2", "3 & 4"),
        M(*[" & ".join(["1"] * (MAX_CELLS // 10 + 1))] * 10) + " + " + M("1"),  # too many cells
    ],
)
def test_refuses_what_it_cannot_read(text: str) -> None:
    assert evaluate(text, _num) is None
