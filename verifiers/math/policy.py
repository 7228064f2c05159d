"""The math verifier's policy as clauses: each states one rule, names the module that enforces it, and
carries golden examples ``(gold, completion, credited)``.

``tests/verifiers/math/test_golden.py`` runs every example through ``verify_math_batch``, and
``docs/verifier-policy.md`` is generated from these clauses (``python docs/gen.py``), so the written
policy and the tested behaviour cannot drift apart. A new policy gets a clause here, with at least one
credited and one refused example where both exist.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Clause:
    """One rule of the math policy.

    Attributes:
        name: a short id (also the golden table's theme name in the tests).
        rule: the rule in one or two sentences, as a person reads it.
        module: where it is enforced (``ratchet.verifiers.math.<module>``).
        examples: ``(gold, completion, credited)`` rows; ``credited`` is the verdict's ``correct``.
    """

    name: str
    rule: str
    module: str
    examples: tuple[tuple[str, str, bool], ...]


CLAUSES: tuple[Clause, ...] = (
    Clause(
        "NUMBERS",
        "Numbers compare exactly as rationals: thousands separators, scientific notation, fractions, mixed "
        "numbers and trailing zeros are forms of one value; never gold x 100 or gold / 100.",
        "compare",
        (
            ("1000", r"\boxed{1,000}", True),
            ("1000", r"\boxed{1{,}000}", True),
            ("1500", r"\boxed{1.5e3}", True),
            ("1500", r"\boxed{1.5 \times 10^{3}}", True),
            (r"\frac{1}{2}", r"\boxed{\frac{2}{4}}", True),
            (r"\frac{1}{2}", r"\boxed{0.5}", True),
            (r"\frac{1}{2}", r"\boxed{1/2}", True),
            (r"-\frac{3}{4}", r"\boxed{\frac{-3}{4}}", True),
            (r"\frac{7}{3}", r"\boxed{2\frac{1}{3}}", True),
            ("5", r"\boxed{500}", False),
            ("5", r"\boxed{0.05}", False),
            ("-3", r"\boxed{3}", False),
            ("2.50", r"\boxed{2.5}", True),
        ),
    ),
    Clause(
        "TOLERANCE",
        "Numeric tolerance (half a unit of the gold's last place) applies only when the gold is marked "
        "approximate or is a decimal rounding of an exact prediction; an unmarked decimal gold is exact, and "
        "a rounding is never an irrational constant.",
        "compare",
        (
            ("约为3.14", r"所以结果是 $\boxed{3.14}$。", True),
            ("approximately 2.72", r"\boxed{2.718}", True),
            ("2.72", "Answer: 2.718", False),
            ("82.0", r"\boxed{82.01}", False),
            ("82.0", r"\boxed{82+\frac{1}{100}}", False),
            ("0.33", r"\boxed{\frac{1}{3}}", True),
            ("approximately 2.72", "Answer: 2.7", False),
            ("2.72", "Answer: 2.7", False),
            ("0.5", r"\boxed{0.54}", False),
            (r"\pi", r"\boxed{3.14}", False),
            (r"\sqrt{2}", r"\boxed{1.41}", False),
            ("1.41", r"\boxed{\sqrt{2}}", True),
            (r"\frac{1}{3}", r"\boxed{0.333}", False),
        ),
    ),
    Clause(
        "PERCENT_UNITS_DEGREES",
        "A percent equals its fraction and its bare number; a unit is dropped when one side has none; degrees are presentation.",
        "normalize",
        (
            (r"50\%", r"\boxed{0.5}", True),
            (r"50\%", r"\boxed{50}", True),
            (r"50\%", r"\boxed{50\%}", True),
            (r"50\%", r"\boxed{0.05}", False),
            (r"30^\circ", r"\boxed{30}", True),
            ("30", r"\boxed{30^{\circ}}", True),
            ("12", r"\boxed{12 \text{ cm}}", True),
        ),
    ),
    Clause(
        "CHOICES",
        "Choice letters compare by letter whatever their wrapping; several letters for one gold letter are a hedge.",
        "parse",
        (
            (r"\text{(B)}", r"\boxed{B}", True),
            ("B", r"\boxed{\textbf{(B)}}", True),
            ("B", r"\boxed{(C)}", False),
            ("A", r"the answer is $\boxed{B, A}$", False),
        ),
    ),
    Clause(
        "STRUCTURES",
        "Intervals compare their openness; sets are unordered and tuples ordered; a gold listing several "
        "answers needs all of them; a labelled value (x = 3) is its value.",
        "compare",
        (
            ("[1,2)", r"\boxed{(1,2]}", False),
            ("[1,2)", r"\boxed{[1,2)}", True),
            (r"\{1,2\}", r"\boxed{\{2,1\}}", True),
            (r"\{1,2\}", r"\boxed{\{1,2,3\}}", False),
            ("(1,2)", r"\boxed{(2,1)}", False),
            ("1331 and 1728", r"\boxed{1728, 1331}", True),
            ("1331 and 1728", r"\boxed{1728}", False),
            ("3", r"\boxed{x=3}", True),
            (r"\text{Monday}", "Answer: Monday", True),
        ),
    ),
    Clause(
        "SYMBOLIC",
        "Expressions and equations are equal when sympy proves them equal (in a killable worker); "
        "equality is always decided exactly.",
        "symbolic",
        (
            (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}", True),
            (r"2\pi", r"\boxed{2 \pi}", True),
            (r"x^2+2x+1", r"\boxed{(x+1)^2}", True),
            (r"x^2+2x+1", r"\boxed{(x-1)^2}", False),
            (r"y=2x+1", r"\boxed{y = 1 + 2x}", True),
        ),
    ),
    Clause(
        "EXTRACTION",
        "One final answer is graded: an <answer> tag, else the last box, else an answer line; never from "
        "inside <think>; several different answers or a hedged list are ambiguous; no last-number fallback.",
        "extract",
        (
            ("3", r"The answer is $\boxed{2}$ or maybe $\boxed{3}$.", False),
            ("7", "<think>Let me compute... the answer is 7.</think><answer>I am not sure.</answer>", False),
            ("7", "<think>maybe 5</think><answer>7</answer>", True),
            ("12", "The answer is one of 12, 15 or 18.", False),
            ("1728", "The only such cube is 1728.", False),
            ("42", "Work...\nAnswer: 42", True),
            ("42", r"\boxed{42} and again \boxed{42}", True),
        ),
    ),
)
