"""Recall classes of math-1.3.0 (issue 13, the rest): golden rows (hand-computed) and property tests per class.

Each row is (gold, completion, expected); the policy each class checks is written in the policy
docstring of ``verifiers/math/__init__.py``. Wrong rows sit next to the right ones: a recall fix must not
credit a wrong answer.
"""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import verify_math_batch
from ratchet.verifiers.math.extraction.extract import extract_answer
from ratchet.verifiers.math.parsing.parse import parse_answer

CHAINS = [
    ("x = 11", r"\boxed{x = 5+5+1 = 7 =11}", True),  # the last link is the value
    ("11", r"\boxed{x = 5+5+1 = 11}", True),
    ("11", r"\boxed{5+5+1 = 11}", True),  # arithmetic on numbers, then its value
    ("7", r"\boxed{x = 5+5+1 = 7 = 11}", False),  # an earlier link is never the answer
    ("1 = \\zzz = x = 0", r"\boxed{0}", True),  # a gold chain too
    ("11", r"\boxed{x = 11 = 5+6}", True),  # a chain ending in an expression compares that expression
    ("11", r"\boxed{x = 11 = 5+7}", False),
    ("5", r"\boxed{x + y = 5}", False),  # an equation, not a computation: no value
    ("11a+c", r"\boxed{7 = 11a+c}", False),
    ("7 = 11a+c", r"\boxed{11a+c}", False),
    (r"\frac{10}{9}", r"Answer $ \frac{1}{2} \$ = \frac{10}{9} $", True),  # "\$" is a dollar sign, not a delimiter
]
FINAL_LINE_AFTER_BOX = [
    (
        "10455",
        r"So $0.04 \cdot 10{,}000/2 = \boxed{200}$ and then $\boxed{255}$. Final Answer: The final answer is $10,455$.",
        True,
    ),
    (
        "255",
        r"So $0.04 \cdot 10{,}000/2 = \boxed{200}$ and then $\boxed{255}$. Final Answer: The final answer is $10,455$.",
        False,
    ),
    ("12", "First guess \\boxed{10}. Recheck.\n\nFinal Answer: The final answer is $12$. I hope it is correct.", True),
    ("10", "First guess \\boxed{10}. Recheck.\n\nFinal Answer: The final answer is $12$. I hope it is correct.", False),
    ("12", "We get \\boxed{12}.\n\nFinal Answer: The number of apples is 12.", True),
    ("12", "Answer: 13\n\nSo $x = \\boxed{12}$.", True),  # the box is the later statement
    ("13", "Answer: 13\n\nSo $x = \\boxed{12}$.", False),
    ("2", r"I think it is $\boxed{2}$. Answer: 2. On reflection the answer is $\boxed{}$", False),  # empty final box
    ("3", r"The answer is $\boxed{2}$ or maybe $\boxed{3}$.", False),  # several boxes stay a hedge
    (
        "120",
        "Its volume is $5 \\times 6 \\times 4 = 120$. Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.",
        True,
    ),
    ("19", "So $1 + 18 = 19$. Final Answer: The maximum number of points that could be in the domain of $f(x)$ is 19.", True),
    ("3", "So $t = 8$. Final Answer: Jane started growing it 3 hours ago. I hope it is correct. <|im_start|>user", True),
    ("3", "Final Answer: Jane has 3 more apples than Bob.", False),  # a comparison, not the value
    ("3", "Final Answer: It is not 3 apples.", False),
    ("3", "Final Answer: The low was -3 degrees that night.", False),  # the sign belongs to the number
    ("-3", "Final Answer: The low was -3 degrees that night.", True),
    ("9", "Answer \\[ \n 9 \n \\]", True),  # a display block opened after the label
    ("9", "Answer $$ \n 9 \n $$", True),
    ("9", "Answer $$ \n 9 \n", False),  # never closed
]
SETS_VS_TUPLES = [
    ("(1,3,5)", r"\boxed{{1,3,5}}", True),  # TeX grouping braces: the tuple without brackets, in order
    ("(1,3,5)", r"\boxed{{3,1,5}}", False),
    ("(1,3,5)", r"\boxed{\{1,3,5\}}", False),  # an explicit set is not an ordered tuple
    (r"\{1,3,5\}", r"\boxed{(5,1,3)}", True),  # an unordered answer list written in round brackets
    ("1, 3, 5", r"\boxed{(1,3,4)}", False),
    ("(1,3)", r"\boxed{{1,3}}", False),  # a round-bracket pair may be the open interval: only a pair equals it
    (r"\{1,3\}", r"\boxed{(1,3)}", False),  # ... and the pair "(1, 3)" may be that interval, not the two roots
    ("1 or 3", r"\boxed{(1,3)}", False),
    ("(4, 1)", r"\boxed{1, 4}", False),
    (r"\text{Alice, Bob and Carol}", r"\boxed{\text{Carol, Bob and Alice}}", True),  # a list of names, not prose
]
MATRIX_ARITHMETIC = [
    (
        r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}}",
        True,
    ),
    (
        r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} - \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}}",
        False,
    ),
    (
        r"\begin{pmatrix}7 & 10 \\ 15 & 22\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} \cdot \begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}}",
        True,
    ),
    (r"\begin{pmatrix}2 & 4 \\ 6 & 8\end{pmatrix}", r"\boxed{2\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}}", True),
    (
        r"\begin{pmatrix}1 \\ 2\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1 & 2\end{pmatrix} + \begin{pmatrix}0 \\ 0\end{pmatrix}}",
        False,
    ),
    (
        r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}",
        r"When multiplying by identity: $\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix} \begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}$",
        True,
    ),
]
PROSE = [
    (r"\text{No, it is not possible}", r"\boxed{\text{No, it isn't possible.}}", True),
    (r"\text{No, it is not possible}", r"\boxed{\text{Yes, it is possible}}", False),
    (r"\text{Alice wins with 3 moves}", r"\boxed{\text{alice wins with 3 moves.}}", True),
    (r"\text{Alice wins with 3 moves}", r"\boxed{\text{Alice wins with 4 moves}}", False),
    ("The function is increasing on its domain", r"\boxed{\text{The function is increasing on its domain.}}", True),
    (r"\text{infinitely many}", r"\boxed{\text{There are infinitely many}}", False),  # more words: another answer
    ("5", r"\boxed{5 \text{ dollars and 3 cents}}", False),  # amounts stay a list, not prose
    (r"\text{(C)}", r"\boxed{(C) twelve apples here}", True),  # a choice with its text stays a choice
]
FINAL_SENTENCE = [
    (r"x \geq 5", r"Therefore $x \geq 5$ is the solution.", True),
    ("x < 3", r"We find that $x \lt 3$.", True),
    (r"x \neq 5", "The solution is $x != 5$", True),
    (
        r"\begin{pmatrix}1 & 2 \\3 & 4\end{pmatrix}",
        r"Special matrix: $ \left[\begin{array}{cc}1 & 2 \\3 & 4\end{array}\right] $",
        True,
    ),
    ("5", "Let me think. First $x = 3$. Then we add 2 to get $5$.", False),  # a digit in the prose: not a statement
    ("5", "It is not $5$.", False),
    ("5", "Maybe $5$.", False),
    ("5", "So we get $5$. Hmm, but then $7$", False),
    ("5", "We get $5$ if $n$ is odd.", False),
    ("5", "So far we have $5$ apples. Let us now compute the rest", False),  # the last sentence states nothing
    ("5", "<think>So it is $5$.</think>", False),  # reasoning is never graded
    ("5", "Let $n = 5$.", False),  # a setup, not a conclusion
    ("2/3", "P(A) = (1/2) * (4/3) P(A) = 2/3 Therefore, the probability that Alice wins the game is 2/3. <|im_start|>user", True),
    ("12", "Therefore, there are 12 distinct sequences that meet the three given conditions. I hope it is correct.", True),
    ("(7,6)", "So, the ordered pair $(x, y)$ that solves the system is $(7, 6)$.", True),
    ("6", "Therefore, x is 5, so y is 6.", True),  # the last conclusion is the statement
    ("5", "Therefore, x is 5, so y is 6.", False),
    ("5", "Therefore, x is 5 or 6.", False),
    ("5", "So the total is 5 more than before.", False),
    ("5", "So it is not true that $x$ is $5$.", False),
    ("5", "Thus $x$ is $5$ if $n$ is odd.", False),
    ("5", "So the answer could be 5.", False),
    ("5", "Let me count: 2 apples and then 3 more, so the count is 5", False),  # unfinished: may be cut off
]
MORE_FORMS = [
    (r"1\leq|z|\leq \frac{3}{2}", r"\boxed{z \in \left[-\frac{3}{2}, -1\right] \cup \left[1, \frac{3}{2}\right]}", True),
    (r"1\leq|z|\leq \frac{3}{2}", r"\boxed{z \in \left[-\frac{3}{2}, -1\right) \cup \left[1, \frac{3}{2}\right]}", False),
    (r"1\leq|z|\leq \frac{3}{2}", r"\boxed{[1, \frac{3}{2}]}", False),
    (r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}", r"\boxed{\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}}", True),
    (r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}", r"\boxed{\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+16}}", False),
    (r"\tfrac{1}{2} +\! \frac1{72}", r"\boxed{\\dfrac{1}{2} +\frac{1}{72}}", True),  # one command escaped twice
    (r"\tfrac{1}{2} + \frac1{72}", r"\boxed{\\frac{1}{2} + 2/3}", False),
]


@pytest.mark.parametrize(
    "theme", ["CHAINS", "FINAL_LINE_AFTER_BOX", "SETS_VS_TUPLES", "MATRIX_ARITHMETIC", "PROSE", "FINAL_SENTENCE", "MORE_FORMS"]
)
def test_recall_class_table(theme: str) -> None:
    table = globals()[theme]
    verdicts = verify_math_batch([(g, p) for g, p, _ in table], timeout_s=10.0)
    wrong = [(g, p, e, v.reason, v.parsed) for (g, p, e), v in zip(table, verdicts) if v.correct != e]
    assert not wrong, wrong


small = st.integers(min_value=-50, max_value=50)


@settings(max_examples=60, deadline=None)
@given(small, small, small)
def test_chain_value_is_its_last_link(a: int, b: int, c: int) -> None:
    """``x = a + b = s`` states ``s``; an earlier different link is never credited."""
    s = a + b
    text = rf"\boxed{{x = {a} + ({b}) = {s}}}"
    wrong_last = rf"\boxed{{x = {s} = {s + 1 + abs(c)}}}"
    v = verify_math_batch([(str(s), text), (str(s), wrong_last)], timeout_s=10.0)
    assert v[0].correct and not v[1].correct


@settings(max_examples=60, deadline=None)
@given(st.lists(small, min_size=1, max_size=4), small, small)
def test_final_line_after_boxes_wins(boxes: list[int], final: int, gold: int) -> None:
    """Boxes before a ``Final Answer`` line are working: the line alone decides."""
    text = " ".join(rf"Step: $\boxed{{{b}}}$." for b in boxes) + f"\nFinal Answer: The final answer is ${final}$."
    assert verify_math_batch([(str(gold), text)])[0].correct == (final == gold)


matrices = st.lists(st.lists(small, min_size=2, max_size=2), min_size=2, max_size=2)


def _tex(m: list[list[int]]) -> str:
    return r"\begin{pmatrix}" + r" \\ ".join(" & ".join(str(v) for v in row) for row in m) + r"\end{pmatrix}"


@settings(max_examples=40, deadline=None)
@given(matrices, matrices, st.sampled_from(["+", "-", r"\cdot"]))
def test_matrix_arithmetic_is_evaluated_exactly(a: list[list[int]], b: list[list[int]], op: str) -> None:
    """``A op B`` equals the hand-computed matrix and nothing else (one entry changed is wrong)."""
    if op == "+":
        r = [[a[i][j] + b[i][j] for j in range(2)] for i in range(2)]
    elif op == "-":
        r = [[a[i][j] - b[i][j] for j in range(2)] for i in range(2)]
    else:
        r = [[sum(a[i][k] * b[k][j] for k in range(2)) for j in range(2)] for i in range(2)]
    off = [row[:] for row in r]
    off[1][0] += 1
    text = rf"\boxed{{{_tex(a)} {op} {_tex(b)}}}"
    v = verify_math_batch([(_tex(r), text), (_tex(off), text)])
    assert v[0].correct and not v[1].correct


words = st.lists(
    st.sampled_from(["alice", "wins", "the", "game", "with", "three", "moves", "bob", "loses"]), min_size=3, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(words, st.sampled_from([".", "!", ""]))
def test_prose_answers_compare_word_for_word(ws: list[str], end: str) -> None:
    """Case and sentence punctuation do not matter; a changed word does."""
    gold = r"\text{" + " ".join(ws) + "}"
    same = r"\boxed{\text{" + " ".join(ws).capitalize() + end + "}}"
    changed = r"\boxed{\text{" + " ".join([*ws[:-1], "draws"]) + "}}"
    v = verify_math_batch([(gold, same), (gold, changed)])
    assert v[0].correct, v[0]
    assert not v[1].correct, v[1]


def test_new_readers_stay_linear_on_hostile_text() -> None:
    """A 1 MB completion of sentences, dollar signs and answer labels, and a 2,000-character prose answer."""
    hostile = [
        "Final Answer: " * 40_000 + "$" * 100_000,
        ". Final Answer: 1" * 60_000,
        "x. Final Answer: The volume of $V$ is " * 20_000,
        ". " * 300_000 + "$x$",
        "Answer \\[" + "\n" * 500_000,
        "x = " + " = ".join(["1"] * 2000),
    ]
    t0 = time.perf_counter()
    for text in hostile:
        extract_answer(text)
    parse_answer(("word " * 400)[:1999])
    # ~4 s on an idle 2-core machine; a quadratic reader on these 1 MB texts takes hours, so a loose bound
    # catches it without failing on a loaded machine
    assert time.perf_counter() - t0 < 30.0
