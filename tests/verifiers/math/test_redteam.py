"""Red-team regressions for the math verifier: (gold, prediction, expected), grouped by failure family.

Each row is a variant of a known grader failure (hedges, rescales, units, choices, relations, think
tags, guards). Most rows are false positives a policy could farm; a few are false negatives that
made correct answers unreadable.
"""

import time

import pytest

from ratchet.verifiers.math import verify_math_batch

HEDGED_CHOICES = [
    ("A", r"\boxed{(A)(B)}", False),
    ("A", r"\boxed{(A), (B)}", False),
    ("A", r"\boxed{(A) 12, (B) 15}", False),
    ("C", r"\boxed{(C) (D)}", False),
    ("C", r"\boxed{(C) not (D)}", False),
    ("C", r"\boxed{(C)/(D)}", False),
    ("C", r"\boxed{(C)(D)(E)}", False),
    ("C", "Answer: (C) 12 or (D) 15", False),
    ("C", "Answer: C) 12", True),
    ("C", "Answer: C. 12", True),
    ("C", r"\boxed{\textbf{(C) } 12}", True),
    ("(C) 12", r"\boxed{12}", True),
    ("(C) 12", r"\boxed{15}", False),
    ("(C) 12", r"\boxed{D}", False),
]
VALUE_WORDS_ARE_NOT_UNITS = [
    ("5", r"\boxed{5 \text{ hundred}}", False),
    ("5", r"\boxed{5 \text{ million}}", False),
    ("5", r"\boxed{5 million dollars}", False),
    ("5000000", r"\boxed{5 \text{ million}}", True),
    ("5", r"\boxed{5 \text{ squared}}", False),
    ("5", r"\boxed{5 \text{ times } 2}", False),
    ("5", r"\boxed{5 \text{ or more}}", False),
    ("5", r"\boxed{5\text{ not}}", False),
    ("5", r"\boxed{5 \text{ dozen}}", False),
    ("5", r"\boxed{5 \text{ thirds}}", False),
    ("5", r"\boxed{5 \text{ minutes}}", True),
    ("5", r"\boxed{5 \text{ cm}^2}", True),
    ("1500", r"\boxed{1.5 \times 10^{3} \text{ J}}", True),
    ("30", r"\boxed{30^{\circ}\text{C}}", True),
]
PERCENT_BOTH_SIDES = [
    (r"50\%", r"\boxed{\frac{1}{2}\%}", False),
    (r"50\%", r"\boxed{0.5\%}", False),
    (r"25\%", r"\boxed{25 \text{ percent}}", True),
    (r"0.5\%", r"\boxed{0.005}", True),
]
DEGREE_MARK_POSITION = [
    (r"30^\circ", r"\boxed{3^\circ0}", False),
    ("30", r"\boxed{\circ 30}", False),
    ("30", r"\boxed{30°}", True),
]
RELATIONS = [
    ("4", r"\boxed{x = 3, y = 4}", False),
    ("3", r"\boxed{x = 3, y = 4}", False),
    ("(3,4)", r"\boxed{x = 3, y = 4}", True),
    ("(3,4)", r"\boxed{x = 4, y = 3}", False),
    ("4", r"\boxed{x = 4 = 3}", False),  # a chain's value is its last link, never an earlier one
    ("3", r"\boxed{x=3=4}", False),
    ("3", r"\boxed{\lim = 3}", False),
    ("3", r"\boxed{3 = x}", True),
    ("3", r"\boxed{x < 3}", False),
    ("1, -1", r"\boxed{\pm 1}", True),
    ("1", r"\boxed{\pm 1}", False),
    (r"\{-1, 1\}", r"\boxed{\{\pm 1\}}", True),
    ("x", r"\boxed{X}", False),
    ("6", r"\boxed{2 3}", False),
    ("180", r"\boxed{12 15}", False),
]
INTERVALS = [
    ("[1,2)", r"\boxed{1 \le x < 2}", True),
    ("[1,2)", r"\boxed{1 < x \le 2}", False),
    ("[1,2)", r"\boxed{x \in [1,2)}", True),
    ("[1,2)", r"\boxed{x \in (1,2]}", False),
    ("[1,2)", r"\boxed{\{x \mid 1 \le x < 2\}}", True),
    (r"(-\infty, 2]", r"\boxed{(-∞, 2]}", True),
    (r"(-\infty, 2]", r"\boxed{(-\infty, 2)}", False),
    (r"(-\infty, 2]", r"\boxed{x \le 2}", True),
    (r"(-\infty, 2]", r"\boxed{x < 2}", False),
    (r"(-\infty, 1) \cup (2, \infty)", r"\boxed{(2, \infty) \cup (-\infty, 1)}", True),
    (r"(-\infty, 1) \cup (2, \infty)", r"\boxed{(-\infty, 1] \cup (2, \infty)}", False),
    (r"\infty", r"\boxed{\infty}", True),
    (r"\infty", r"\boxed{-\infty}", False),
]
SETS_AND_FORMS = [
    (r"\{1,2\}", r"\boxed{\lbrace 2, 1 \rbrace}", True),
    (r"\{1,2\}", r"\boxed{\{1,1,2\}}", True),
    (r"\{1,2\}", r"\boxed{\{1,1\}}", False),
    (r"\emptyset", r"\boxed{\{\}}", True),
    (r"\emptyset", r"\boxed{\{0\}}", False),
    (r"\frac{1}{3}", r"\boxed{0.\overline{3}}", True),
    (r"\frac{1}{6}", r"\boxed{0.1\overline{6}}", True),
    (r"\frac{1}{3}", r"\boxed{0.333}", False),
    (r"\sqrt{8}", r"\boxed{2\sqrt2}", True),
    (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{\sqrt2}{2}}", True),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\boxed{\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}}", False),
    (r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}", r"\boxed{\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}}", True),
    ("0", r"\boxed{x - x}", True),
    ("yes", r"\boxed{\text{Yes}}", True),
]
CONFLICTING_FINAL_ANSWERS = [
    ("3", "\\boxed{3}\nAnswer: 4", False),
    ("3", "Answer: 4\n\\boxed{3}", True),  # the last explicit final answer wins (math-1.3.0)
    ("4", "Answer: 4\n\\boxed{3}", False),  # ... and an earlier one is never credited
    ("4", "\\boxed{4}\nFinal Answer: 3", False),
    ("3", "\\boxed{3}\nFinal answer: 3", True),
    ("3", "\\boxed{3}\nAnswer: the value computed above", True),
    ("3", r"<answer>\boxed{3}</answer> \boxed{4}", False),
    ("7", r"<answer></answer>\boxed{7}", False),
    ("3", r"\boxed{\boxed{3}}", True),
    ("3", r"\boxed{\boxed{4}3}", False),
    ("3", r"\boxed3", True),
]
REASONING_TAGS = [
    ("7", "<think >\\boxed{7}</think >", False),
    ("7", "<thinking>\\boxed{7}</thinking>", False),
    ("7", "<reasoning>\\boxed{7}</reasoning><answer>?</answer>", False),
    ("7", "<THINK>\\boxed{7}</THINK> I'm not sure.", False),
    ("7", "<thinking>scratch 5</thinking>\\boxed{7}", True),
]
GUARDS = [
    ("2", r"\boxed{9!!!!!}", False),
    ("2", r"\boxed{(10^{10})!}", False),
    ("2", r"\boxed{10^{10}!}", False),
    ("2", r"\boxed{2^{9999}^{9999}}", False),
    ("2", r"\boxed{9^9^9}", False),
    ("2", r"\boxed{" + "{" * 500 + "2" + "}" * 500 + "}", True),
]

# --- math-1.3.1 red-team (issue 13): what a completion writes after its final answer can only take credit away
RETRACTED_AFTER_FINAL = [
    ("5", "\\boxed{5}\n\nWait, let me recheck. Actually the answer should be 6.", False),
    ("5", "\\boxed{5}\n\nHmm, that's wrong. The correct answer is 6.", False),
    ("6", "\\boxed{5}\n\nHmm, that's wrong. The correct answer is 6.", False),  # two final answers: no credit
    ("5", "\\boxed{5}\nActually, I made an error; the answer is $6$.", False),
    ("5", "Final Answer: The final answer is $5$. I hope it is correct.\n\nActually no, it's 6.", False),
    ("5", "Final Answer: 5. Wait, no, that's wrong.", False),
    ("5", "The answer is 5. No wait, it is 6.", False),
    ("5", "It is tempting to answer \\boxed{5}, but that ignores the constraint.", False),
    ("A", "\\boxed{\\text{A}}\n\nWait, B.", False),
    ("5", "Please put your final answer within \\boxed{5}.\n\nThe answer is 6.", False),  # a later rival
    ("5", "\\boxed{5}\n\nHowever, the problem also allows $n = 0$, which gives 6.", False),
    ("5", "\\boxed{5}\n\nNote: the problem is symmetric, but this does not change the count.", True),
    ("5", "The final answer is $\\boxed{5}$.\n\n---\nIf you have any questions, feel free to ask!", True),
    ("5", "\\boxed{5}\n\nWait, is that right? Yes: the answer is 5.", True),  # restated after the retraction
    ("5", "The answer is $\\boxed{5}$, which is the number of distinct primes.", True),
    ("5", "\\boxed{5}\n\n**Verification**: substituting $x=5$ gives $25 - 25 = 0$.", True),
    ("5", "$\\boxed{5}$ (there are no other solutions)", True),
    ("\\text{No}", "Answer: No", True),
    ("\\text{No}", "The answer is no.", True),
    ("5", "<think>5</think><answer>5</answer>\nWait, actually 6.", False),
    ("5", "<answer>\\boxed{5}\n\nHmm, that's wrong.</answer>", False),
    ("5", "<think>5</think><answer>5</answer>", True),
    ("5", "Oops, \\boxed{5} was a typo.\n\n**Answer: 5**\n\nOops, I misread the question.", False),
    ("5", "\\boxed{5}\n\nLet me recheck the second case.", False),
    ("5", "所以答案是 $\\boxed{5}$。\n\n等等，我算错了，答案应该是6。", False),
    ("5", "\\boxed{5}\n\n等一下，重新计算。", False),
    ("5", "\\boxed{5}\n\n这个图形不对称，但计数不变。", True),
    # right answers explained after the box: "mistake", "wrong", "actually", "errors" alone are no retraction
    ("5", "\\boxed{5}\n\nThe common mistake is to answer 6.", True),
    ("5", "\\boxed{5}\n\nNote that $6$ would be wrong because it double-counts.", True),
    ("5", "\\boxed{5}\n\nThis is because the two errors cancel.", True),
    ("5", "The answer is $\\boxed{5}$.\n\nActually, we can also see this directly: $2+3=5$.", True),
]
DANGLING_FINAL_LABEL = [
    ("5", "\\boxed{5}\nFinal Answer:", False),
    ("5", "\\boxed{5}\nFinal Answer: ", False),
    ("5", "\\boxed{5}\nThe final answer is $", False),
    ("5", "\\boxed{5}\n\nSo the answer is", False),
    ("5", "\\boxed{5}\n**Final Answer**\n", False),
    ("5", "\\boxed{5}\nAnswer: \\(", False),
    ("5", "Could the answer be $\\boxed{5}$?", False),
    ("5", "\\boxed{5} is the final answer.", True),
    ("5", "\\boxed{5} is the answer", True),
]
HYPOTHETICAL_AND_REPEATED_PHRASES = [
    ("5", "Suppose the answer is $5$.", False),
    ("5", "Let's check whether the answer is 5.", False),
    ("5", "If the answer is 5, then the sum exceeds 20.", False),
    ("5", "The answer is 6. The answer is 5.", False),
    ("5", "The answer is 5. The answer is 5.", True),
    ("5", "First we simplify. So the answer is $5$.", True),
    ("5", "Therefore, if we add them up, the answer is 5.", True),
    ("5", "After checking all cases, the answer is 5.", True),
    ("5", "Let me summarize: the answer is 5.", True),
]
TWO_STATEMENTS = [
    ("5", "Answer: x = 5, so y = 10", False),
    ("5", "**Answer:** $x = 5$, so $y = 10$", False),
    ("5", "**Answer:** $x = 5$, so we are done.", True),
    ("5", "Final answer: the smallest is 3 and the largest is 5", False),
    ("5", "Final answer: at least 5", False),
    ("5", "Final answer: at most 5", False),
    ("5", "Final answer: It cannot be 5.", False),
    ("12", "Answer: 12, since $3 \\cdot 4 = 12$", True),  # a justification is not a second statement
    ("12", "Final Answer: The area of the 3 by 4 rectangle is 12.", True),
    ("5", "Therefore, Jane has 5 apples.", True),
    ("5", "Thus x is 12 and y is 5.", False),
    ("5", "\\boxed{x = 5 \\Rightarrow y = 3}", False),
    ("3", "\\boxed{x = 5 \\Rightarrow y = 3}", False),
    ("3", "\\boxed{x = 5 \\text{ so } y = 3}", False),
    ("11", "\\boxed{x = 5+5+1 = 7 = 11}", True),  # a chain of equalities still states its last link
    ("3/4", "Therefore, the chance that the red ball is drawn first is 3/4.", True),
    ("5", "\\boxed{x := 5}", True),
]
MARKED_UNITS = [
    ("8", "\\boxed{8\\text{k}}", False),  # k is thousands, a value change, not a unit
    ("8 \\text{ cm}^2", "\\boxed{8 \\text{ cm}}", False),
    ("8 \\text{ cm}^2", "\\boxed{8 \\text{ cm}^3}", False),
    ("8 \\text{ cm}^2", "\\boxed{8 \\text{ square centimeters}}", True),
    ("8 \\text{ cm}^2", "\\boxed{8 cm^2}", True),
    ("8 \\text{ ft}^2", "\\boxed{8 \\text{ sq ft}}", True),
    ("8 \\text{ m}^3", "\\boxed{8 \\text{ cubic meters}}", True),
    ("\\$8", "\\boxed{8\\%}", False),  # a dollar amount is not a percent
    ("8\\%", "\\boxed{\\$8}", False),
    ("\\$8", "\\boxed{8 \\text{ dollars}}", True),
    ("\\$8", "\\boxed{8}", True),
    ("30^\\circ", "\\boxed{30 \\text{ radians}}", False),
    ("30^\\circ", "\\boxed{30 \\text{ rad}}", False),
    (r"\frac{\pi}{6}", r"\boxed{\frac{\pi}{6}^\circ}", False),  # a degree mark on a multiple of pi
    ("30^\\circ", "\\boxed{30 \\text{ degrees}}", True),
    ("100^\\circ \\text{C}", "\\boxed{100^\\circ}", True),
    ("30", "\\boxed{30^\\circ}", True),
]
OPEN_ENDED = [
    ("5", "\\boxed{5\\ldots}", False),
    ("5", "\\boxed{5 \\dots}", False),
    ("0.333", "\\boxed{0.333\\ldots}", False),
    ("5", "\\boxed{5.}", True),
]
REAL_LINE = [
    (r"\mathbb{R}", r"\boxed{(-\infty, \infty)}", True),
    (r"(-\infty, \infty)", r"\boxed{x \in \mathbb{R}}", True),
    (r"(0, \infty)", r"\boxed{\mathbb{R}}", False),
]


@pytest.mark.parametrize(
    "theme",
    [
        "HEDGED_CHOICES",
        "VALUE_WORDS_ARE_NOT_UNITS",
        "PERCENT_BOTH_SIDES",
        "DEGREE_MARK_POSITION",
        "RELATIONS",
        "INTERVALS",
        "SETS_AND_FORMS",
        "CONFLICTING_FINAL_ANSWERS",
        "REASONING_TAGS",
        "GUARDS",
        "RETRACTED_AFTER_FINAL",
        "DANGLING_FINAL_LABEL",
        "HYPOTHETICAL_AND_REPEATED_PHRASES",
        "TWO_STATEMENTS",
        "MARKED_UNITS",
        "OPEN_ENDED",
        "REAL_LINE",
    ],
)
def test_redteam_table(theme: str) -> None:
    table = globals()[theme]
    verdicts = verify_math_batch([(g, p) for g, p, _ in table], timeout_s=5.0)
    wrong = [(g, p, e, v.reason) for (g, p, e), v in zip(table, verdicts) if v.correct != e]
    assert not wrong, wrong


def test_guards_refuse_cheaply() -> None:
    """Iterated/computed factorials and double superscripts never reach sympy."""
    t0 = time.perf_counter()
    verdicts = verify_math_batch([("2", r"\boxed{9!!!!!}"), ("2", r"\boxed{(10^{10})!}"), ("2", r"\boxed{9^9^9}")])
    assert all(v.reason == "timeout" and v.details.get("guard") for v in verdicts), [v.details for v in verdicts]
    assert time.perf_counter() - t0 < 1.0


def test_tail_checks_are_linear() -> None:
    """Retraction, dangling-label and phrase scans after a final answer stay linear on hostile tails."""
    tails = [" wait" * 100_000, "\n" * 200_000 + "Final Answer:", "answer is " * 50_000, " Suppose" * 20_000]
    t0 = time.perf_counter()
    verdicts = verify_math_batch([("5", "\\boxed{5}" + t) for t in tails] + [("5", "Suppose " * 20_000 + "the answer is 5")])
    assert [v.correct for v in verdicts] == [False, False, False, True, False], [v.reason for v in verdicts]
    assert time.perf_counter() - t0 < 2.0


def test_a_stored_gold_solution_is_read_without_tail_checks() -> None:
    """A gold stored as a model solution is trusted text: a note after its final answer is not a retraction."""
    gold = "Final Answer: The final answer is $28\\%$. I hope it is correct. Note: the solution above is incorrect; wait."
    assert verify_math_batch([(gold, "\\boxed{28\\%}")])[0].correct
    assert not verify_math_batch([("28", gold)])[0].correct  # the same text as a completion takes its answer back


def test_a_later_rival_that_is_not_math_does_not_block_the_box() -> None:
    """Only a rival that reads as math makes the box ambiguous (a quoted sentence is not a second answer)."""
    text = '\\boxed{12} was our result. The final answer is "twelve, as above".'
    assert verify_math_batch([("12", text)])[0].correct
