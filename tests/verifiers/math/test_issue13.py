"""Issue 13's failure classes: golden rows (hand-computed) and property tests, grouped by class.

Each row is (gold, completion, expected). The policy each class checks is written in the policy
docstring of ``verifiers/math/__init__.py``.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet.verifiers.math import verify_math, verify_math_batch

FINAL_SENTENCES = [
    ("12", "3 times 4 is 12.\nFinal Answer: The final answer is $12$. I hope it is correct.", True),
    ("12", "Final Answer: The final answer is $13$. I hope it is correct.", False),
    ("9", "Let me add: 4 + 5 = 9.\n\n🎯 **Final answer:** 9", True),
    ("9", "**Answer:** $9$", True),
    ("9", "Answer \\[ 9 \\]", True),
    ("9", "### Final Answer\n\n9", True),
    ("9", "### Final Answer\n\n8", False),
    ("7", r"The problem asks me to put the answer in \boxed{}. 3 + 4 = 7, so the answer is 7.", True),
    ("7", r"Put the answer in \boxed and so the answer is 7.", True),  # "\boxed and" is no box
    ("7", r"Put the answer in \boxed and stop.", False),
    ("7", "the answer is $7$, which is prime.", True),
    ("7", "Answer: $7$ or $8$", False),
    ("5", "Answer: 5, although 6 also works", False),
    ("18", "She makes 9 * 2 = $18.\n#### 18", True),  # GSM8K's final line
    ("18", "#### Step 1\nShe makes 9 * 2 = $16.\n#### 16", False),
    ("4", "<|begin_of_thought|>maybe \\boxed{3}<|end_of_thought|>\n<|begin_of_solution|>\\boxed{4}<|end_of_solution|>", True),
    ("3", "<|begin_of_thought|>maybe \\boxed{3}<|end_of_thought|>\n<|begin_of_solution|>\\boxed{4}<|end_of_solution|>", False),
    ("18.90", "Final Answer: The final answer is $\\$18.90$. I hope it is correct.", True),
    ("x < 3", r"\boxed{We find that $x \lt 3$.}", True),  # prose around one math span
    (
        r"\begin{pmatrix}0 & 0 \\ 0 & 0\end{pmatrix}",
        r"\boxed{Here is a zero matrix: $\begin{pmatrix}0 & 0 \\ 0 & 0\end{pmatrix}$}",
        True,
    ),
    ("5", r"\boxed{It is not $5$}", False),
    ("5", r"\boxed{maybe $5$}", False),
    ("5", r"\boxed{$5$ if n is odd}", False),
    ("9", "\\boxed{Answer $ \n 9 \n $}", False),  # inline math does not span lines
    ("9", "\\boxed{Answer \\[ \n 9 \n \\]}", True),
    ("34", r"\boxed{Final Answer: The largest $n$ is 34.}", True),
    ("35", r"\boxed{Final Answer: The largest $n$ is 34.}", False),
]
GOLD_FORMS = [
    (r"Adding gives $2+5=7$, so the answer is $\boxed{7}$.", r"The total is $\boxed{7}$.", True),
    (r"First $\boxed{3}$ is wrong; the answer is $\boxed{8}$.", r"$\boxed{3}$", False),
    ("(a, b) = (4, 1)", r"So $\boxed{(4, 1)}$.", True),
    ("(a, b) = (4, 1)", r"So $\boxed{(1, 4)}$.", False),
    ("k = 45, n = 2", r"$\boxed{(45, 2)}$", True),
    ("k = 45, n = 2", r"$\boxed{(2, 45)}$", False),
    ("|AB| = 1", r"$\boxed{1}$", True),
    ("|AB| = 1", r"$\boxed{2}$", False),
    (r"\frac{NO}{BO} = \frac{1}{2}", r"$\boxed{0.5}$", True),
    ("x + y = 5", r"$\boxed{5}$", False),
    ("(a, b) = (4, 1)", r"$\boxed{b = 1, a = 4}$", True),
    ("(a, b) = (4, 1)", r"$\boxed{a = 1, b = 4}$", False),
    ("(a, b) = (4, 1)", r"$\boxed{c = 4, b = 1}$", False),  # an equation is not a label: 5 is not the line
]
LATEX = [
    ("3/4", r"$\boxed{\cfrac{3}{4}}$", True),
    ("40", r"$\boxed{40\textnormal{ km}}$", True),
    ("40", r"$\boxed{40 \textbf{meters}}$", True),
    (r"\frac{5}{2}\pi", r"$\boxed{\frac52\pi}$", True),
    (r"\frac{5}{2}\pi", r"$\boxed{\frac53\pi}$", False),
    ("(1, 2)", r"$\boxed{\left( 1, 2 \right)}$", True),
    (r"\frac{1}{2}", r"$\\boxed{\\frac{1}{2}}$", True),  # JSON-escaped backslashes
    (r"\begin{pmatrix} 2 & 0 \\ 1 & 3 \end{pmatrix}", r"$\boxed{\begin{bmatrix} 2 & 0 \\ 1 & 3 \end{bmatrix}}$", True),
    (r"\begin{pmatrix} 2 & 0 \\ 1 & 3 \end{pmatrix}", r"$\boxed{\begin{array}{cc} 2 & 0 \\ 1 & 3 \end{array}}$", True),
    (r"\begin{pmatrix} 2 & 0 \\ 1 & 3 \end{pmatrix}", r"$\boxed{\begin{pmatrix} 2 & 0 \\ 3 & 1 \end{pmatrix}}$", False),
]
MEANING = [
    (r"[3, \infty)", r"So $x \in \boxed{[3, +\infty)}$.", True),
    (r"(-\infty, 4)", r"The solution set is $\boxed{x < 4}$.", True),
    (r"(-\infty, 4]", r"The solution set is $\boxed{x < 4}$.", False),
    ("x < 4", r"$\boxed{(-\infty, 4)}$", True),
    ("x > 4", r"$\boxed{(-\infty, 4)}$", False),
    ("y = 2x + 1", r"The line is $\boxed{2x - y + 1 = 0}$.", True),
    ("y = 2x + 1", r"$\boxed{2y = 4x + 2}$", True),
    ("y = 2x + 1", r"$\boxed{y = 2x + 2}$", False),
    ("2, 5", r"The roots are $\boxed{2}$ and $\boxed{5}$.", True),
    ("2, 5", r"The roots are $\boxed{2}$, $\boxed{5}$ or maybe $\boxed{7}$.", False),
    ("2, 5", r"The roots are $\boxed{2}$ and $\boxed{7}$.", False),
    ("5", r"$\boxed{2}$ and $\boxed{5}$", False),
    (r"8\text{ kg}", r"$\boxed{8\text{ g}}$", False),
    (r"8\text{ kg}", r"$\boxed{8\text{ kilograms}}$", True),
    (r"8\text{ kg}", r"$\boxed{8}$", True),
    ("8", r"$\boxed{8 \text{ cm}}$", True),
]
MALFORMED_FINAL = [
    ("6", r"First I get $\boxed{6}$. Hmm, that misses a case; recounting, the answer is $\boxed{\frac{13}{", False),
    ("9", "<answer>9</answer>\nActually I made an error.\n<answer>1", False),
    ("2", r"I think it is $\boxed{2}$. On reflection the answer is $\boxed{}$", False),
    ("9", "<think>hmm</think><answer>9", True),  # a lone unclosed tag: generation stopped at </answer>
    ("9", r"\boxed{\boxed{9}}", True),
]
GRADER_SUITE_CLASSES = [  # forms seen in public graders' golden suites (bare answers in a boxed final line)
    ("1000.99", r"\boxed{1000,99}", True),  # decimal comma
    ("0,111", r"\boxed{0.111}", True),
    ("1.2", r"\boxed{1,2}", True),
    ("1.2", r"\boxed{1, 2}", False),  # a list, not a decimal comma
    ("1000", r"\boxed{1,000}", True),
    ("11111111100", r"\boxed{11,\! 111,\! 111,\! 100}", True),
    ("11, 111", r"\boxed{11,\! 111}", False),
    (r"S_{MBCN}:S=7:32", r"\boxed{7:32}", True),
    (r"S_{MBCN}:S=7:32", r"\boxed{32:7}", False),
    ("A:B=1", r"\boxed{1}", True),
    ("(11,7)or(7,11)", r"\boxed{(7,11),\ (11,7)}", True),
    ("(11,7)or(7,11)", r"\boxed{(7,11)}", False),
    ("p=5,q=2;p=7,q=2", r"\boxed{(5,2),(7,2)}", True),
    ("p=5,q=2;p=7,q=2", r"\boxed{(5,2),(2,7)}", False),
    ("(0;0;6),(4;-2;0)", r"\boxed{(4, -2, 0), (0, 0, 6)}", True),
    ("(1,2),(3,4)", r"\boxed{(3,4), (1,2), (3, 4)}", True),  # a solution named twice is one solution
    ("f(2) < f(1) < f(4)", r"\boxed{f(2) < f(1) < f(4)}", True),
    ("f(2) < f(1) < f(4)", r"\boxed{f(1) < f(2) < f(4)}", False),
    ("0<f(x)<1", r"\boxed{(0,1)}", True),
    ("1/3", r"\boxed{x=\frac13\approx0.33}", True),
    ("1/3", r"\boxed{x=\frac14\approx0.33}", False),
    (r"\frac{1}{12}", r"\boxed{0.0833333333333333}", True),  # a float rendering
    (r"\frac{1}{12}", r"\boxed{0.0833}", False),  # a rounding
    (r"\frac{1}{12}", r"\boxed{0.0833333333533333}", False),
    (r"\frac{5\sqrt{42}}{27}", r"\boxed{\frac{10\sqrt{10.5}}{27}}", True),  # 10.5 is exactly 21/2
    (r"\boxed{1} and \boxed{-2}", r"\boxed{-2, 1}", True),
    (r"\boxed{1} no no no no no \boxed{2}", r"\boxed{1, 2}", False),
    (r"\boxed{1} no no no no no \boxed{2}", r"\boxed{2}", True),
    (
        "The stock keeps 90% then 80% of that.\nFinal Answer: The final answer is $28 \\%$. I hope it is correct.",
        r"a total loss of $\boxed{28\%}$.",
        True,
    ),
    (r"x_{1}=2,\quadx_{2}=3", r"$\boxed{2} \quad \text{and} \quad \boxed{3}$", True),
    (r"$\boxed{1}\boxed{2}$", r"\boxed{2, 1}", True),
    ("120", "Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", True),
    ("121", "Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", False),
    (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}", r"\boxed{\left[\begin{array}{cc}1 & 2 \\ 3 & 4\end{array}\right]}", True),
    ("5", r"\boxed{5}<|im_end|><|im_start|>user: and 2+4? <|im_start|>assistant \boxed{6}", True),
    ("6", r"\boxed{5}<|im_end|><|im_start|>user: and 2+4? <|im_start|>assistant \boxed{6}", False),
]
THEMES = {
    "GRADER_SUITE_CLASSES": GRADER_SUITE_CLASSES,
    "FINAL_SENTENCES": FINAL_SENTENCES,
    "GOLD_FORMS": GOLD_FORMS,
    "LATEX": LATEX,
    "MEANING": MEANING,
    "MALFORMED_FINAL": MALFORMED_FINAL,
}


@pytest.mark.parametrize("theme", sorted(THEMES))
def test_issue13_golden(theme: str) -> None:
    table = THEMES[theme]
    verdicts = verify_math_batch([(g, p) for g, p, _ in table], timeout_s=10.0)
    wrong = [(g, p, e, v.reason) for (g, p, e), v in zip(table, verdicts) if v.correct != e]
    assert not wrong, wrong


def test_malformed_final_reason_names_the_problem() -> None:
    v = verify_math("6", r"$\boxed{6}$ no wait $\boxed{7")
    assert v.reason == "no_answer" and "not closed" in v.details["problem"]


answers = st.integers(-999, 999).map(str)
tails = st.sampled_from([r"\boxed{", r"\boxed{\frac{1}{", r"\boxed{}", "<answer>", r"\boxed{ }"])


@settings(max_examples=60, deadline=None)
@given(answers, answers, tails)
def test_retracted_answer_never_credited(first: str, second: str, tail: str) -> None:
    """Whatever the malformed final attempt, the earlier answer earns nothing."""
    wrap = "<answer>%s</answer>" if tail == "<answer>" else r"\boxed{%s}"
    v = verify_math(first, f"I get {wrap % first}. Wait, recounting: {tail}{second[:1]}")
    assert not v.correct


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-50, 50), min_size=2, max_size=4, unique=True), st.integers(100, 200), st.randoms())
def test_boxes_equal_to_gold_answers_only(roots: list[int], extra: int, rnd) -> None:
    """Boxes that are exactly the gold's answers (any order) are right; one box more is a hedge."""
    gold = ", ".join(map(str, roots))
    shuffled = roots[:]
    rnd.shuffle(shuffled)
    boxes = " and ".join(rf"\boxed{{{r}}}" for r in shuffled)
    assert verify_math(gold, f"The roots are {boxes}.").correct
    assert not verify_math(gold, f"The roots are {boxes} and \\boxed{{{extra}}}.").correct
    assert not verify_math(gold, rf"The roots are {boxes[: boxes.rindex(chr(92))]}\boxed{{{extra}}}.").correct


units = st.sampled_from(["kg", "g", "km", "m", "cm", "s", "h", "ft"])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10**6), units, units)
def test_units_that_differ_are_different_answers(n: int, u1: str, u2: str) -> None:
    v = verify_math(rf"{n}\text{{ {u1}}}", rf"\boxed{{{n}\text{{ {u2}}}}}")
    assert v.correct == (u1 == u2)


@settings(max_examples=60, deadline=None)
@given(st.integers(-99, 99), st.sampled_from(["<", "<=", ">", ">="]), st.sampled_from(["<", "<=", ">", ">="]))
def test_inequality_equals_its_interval(a: int, op: str, op_pred: str) -> None:
    """``x OP a`` equals exactly one interval; the interval of another operator is wrong."""
    interval = {
        "<": rf"(-\infty, {a})",
        "<=": rf"(-\infty, {a}]",
        ">": rf"({a}, \infty)",
        ">=": rf"[{a}, \infty)",
    }
    tex = {"<": "<", "<=": r"\le", ">": ">", ">=": r"\ge"}
    assert verify_math(interval[op], rf"\boxed{{x {tex[op_pred]} {a}}}").correct == (op == op_pred)


PIECES = [
    "1",
    "2",
    " ",
    "x",
    "\\frac{",
    "{",
    "}",
    "(",
    ")",
    ",",
    ";",
    "=",
    "<",
    ":",
    "\\text{ kg}",
    "and",
    "or",
    "\\boxed{",
    "</answer>",
    "<answer>",
    "\\infty",
    "\\pi",
    "[",
    "]",
    "\\{",
    "\\}",
    "|",
    "\\!",
    ".",
    "%",
    "$",
]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=14).map("".join), st.lists(st.sampled_from(PIECES), max_size=14).map("".join))
def test_any_text_gets_a_verdict(gold: str, completion: str) -> None:
    """Whatever the gold and completion, the verifier answers with a verdict, never an exception."""
    v = verify_math(gold or "1", completion, timeout_s=2.0)
    assert v.reason in ("ok", "wrong", "no_answer", "ambiguous", "parse_error", "timeout", "bad_gold")
