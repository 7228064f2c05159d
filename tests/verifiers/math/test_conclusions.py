"""Red team of math-1.5.0's rules (issue 38): each near miss of a new rule is refused.

Sentences under a bare marker, differences and restated conditions, the Solution: marker, stated choices and the
task's options: every row changes one thing that makes the answer unreadable, wrong or hedged.
"""

from __future__ import annotations

import pytest

from ratchet.verifiers.math import verify_math

C = ["40", "62", "72", "92", "102"]
REFUSED = [  # (gold, completion, choices): near misses of the math-1.5.0 rules
    ("3", "Answer:\nJane has 3 more apples than Bob.", None),
    ("3", "Final Answer: Jane has 3 more apples than Bob.", None),
    ("3", "Answer:\n3 hundred apples", None),
    ("5", "Answer: 5 squared", None),
    ("3", "Answer: 3 hundred thousand apples", None),
    ("5", "Solution:\nLet the number of apples be 5.", None),
    ("5", "Solution:\nFirst, we find how many apples 5 boxes hold.", None),
    ("5", "Solution:\nWe need 5 boxes.", None),
    ("5", "Solution:\nThere are 5 boxes\nand 7 more", None),
    ("4", "He rides 9 miles each hour, 9 * 4 = 36.\nTherefore, Omar can cycle 36 miles in 4 hours.", None),
    ("36", "He rides 9 miles each hour.\nTherefore, Omar can cycle 36 miles in 4 hours.", None),
    ("1", "There are 6 faces, 6 / 6 = 1.\nThe chance is 1 in 6 throws.", None),
    ("C", "Adding gives \\boxed{72}.\n\nThe answer is (C) or (D).", None),
    ("C", "The answer is (C). Wait, actually it is (D).", None),
    ("C", "\\boxed{B}\n\nThe answer is (C).", None),
    ("C", "The answer is C (7).", C),
    ("C", "Adding gives \\boxed{62}.\n\nThe answer is (C).", C),  # 62 is option B: a rival pair
    ("C", "The answer is (C).\n\nSo the answer is 70.", C),  # a value after the letter
    ("B", "The ratio of XY to XZ is (B) 2/3 if x is positive.", None),
    ("B", "The ratio of XY to XZ is not (B) 2/3.", None),
    ("B", "Maybe the ratio of XY to XZ is (B) 2/3.", None),
    ("C", "So the answer is 72 or 62.", C),
    ("C", "So the answer is 62.", C),
    ("5", "Answer: x = 5 apples and y = 7 pears", None),
    ("14", "Red: 50 miles, blue: 36 miles.\nThe red car went 14 miles farther than the blue car.", None),
    ("14", "Red: 50 miles, blue: 36 miles, 50 - 36 = 14.\nThe red car went 14 miles farther than 3 times the blue car.", None),
    ("14", "50 - 36 = 14.\nThe red car went at least 14 miles farther than the blue car.", None),
    ("6", "9 - 3 = 6\nAnswer:\nMia would not still have 6 pencils.", None),
    ("6", "9 - 3 = 6\nAnswer:\nMaybe Mia would still have 6 pencils.", None),
    ("45", "30 + 15 = 45\nAnswer:\nThis week, 45 books are on the shelf, and 12 on the floor.", None),
    ("48", "Answer: \n\nNumber of pears Ana picked = 48 or 49", None),
    ("31", "40 - 9 = 31\nAnswer:\ny = 31 ducks were left, wait, 30.", None),
    ("C", "The correct answer is:\nC or D", None),
    ("2", "The answer is:\nWait, let me recompute: 2.", None),
    ("D", "So the answer is D (12) or C (10).", None),
    ("12", "So the answer is D (12).", ["10", "11", "13", "14"]),
    ("A", "The answer is A (B + C).", None),
    ("0.0 - 0.2", "Thus, the answer is C (0.4 - 0.6).", None),  # two ranges, equal as differences
    ("0.0 - 0.2", "The answer is 0.4 - 0.6.", None),
]


@pytest.mark.parametrize(("gold", "completion", "choices"), REFUSED)
def test_near_misses_are_refused(gold: str, completion: str, choices: list[str] | None) -> None:
    v = verify_math(gold, completion, choices=choices)
    assert not v.correct, (v.reason, v.parsed)
