"""The math verifier's policy as clauses: each states one rule, names the module that enforces it, and
carries golden examples ``(gold, completion, credited)``.

``tests/verifiers/math/test_golden.py`` runs every example through ``verify_math_batch``, and
``docs/verifier-policy.md`` is generated from these clauses (``python docs/gen.py``), so the written
policy and the tested behaviour cannot drift apart. A new policy gets a clause here, with at least one
credited and one refused example where both exist.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSION = "math-1.5.0"  # bumped by any change to a clause below or to the prose policy of ``verifiers.math.verify``


@dataclass(frozen=True)
class Clause:
    """One rule of the math policy.

    Attributes:
        name: a short id (also the golden table's theme name in the tests).
        rule: the rule in one or two sentences, as a person reads it.
        module: where it is enforced (``verifiers/math/<module>.py``).
        examples: ``(gold, completion, credited)`` rows; ``credited`` is the verdict's ``correct``.
        choices: the options every example's task lists (a multiple-choice task record's ``choices``), or None.
    """

    name: str
    rule: str
    module: str
    examples: tuple[tuple[str, str, bool], ...]
    choices: tuple[str, ...] | None = None


CLAUSES: tuple[Clause, ...] = (
    Clause(
        "NUMBERS",
        "Numbers compare exactly as rationals: thousands separators, scientific notation, fractions, mixed "
        "numbers and trailing zeros are forms of one value; never gold x 100 or gold / 100.",
        "comparison/compare",
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
        "comparison/compare",
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
        "parsing/normalize",
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
        "parsing/parse",
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
        "comparison/compare",
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
        "comparison/symbolic",
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
        "extraction/extract",
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
    Clause(
        "A_LINES",
        "A closing ``A: N`` line (the Q:/A: few-shot format of early GSM8K releases) is an answer line, unless "
        "``B:`` lines list options or it states no math (``A: Let's think step by step.`` opens the turn).",
        "extraction/lines",
        (
            ("14", "Two boxes have 2 * 7 = 14 pens.\nA: 14", True),
            ("14", "Two boxes have 2 * 7 = 15 pens.\nA: 15", False),
            ("12", "Which is right?\nA: 12\nB: 14\nC: 16", False),  # an option list, not an answer
            ("5", "A: Let's think step by step.\nShe has 2 + 3 = 5 apples.\nThe answer is 5.", True),  # an opening, not an answer
        ),
    ),
    Clause(
        "INVENTED_QUESTIONS",
        "A ``Q:``/``Question:``/``Problem:`` line after an answer marker opens an exercise the model made up: the "
        "completion ends there (what follows is neither the answer nor a rival), unless it retracts the answer.",
        "extraction/extract",
        (
            ("9", "She has 12 - 3 = 9 apples left.\nA: 9\n\nQ: Tom has 4 cars. He buys 3.\nA: 7", True),
            ("7", "She has 12 - 3 = 9 apples left.\nA: 9\n\nQ: Tom has 4 cars. He buys 3.\nA: 7", False),
            ("9", "The answer is 9.\n\nProblem:\nFind f(3).\nSolution:\nThe answer is 16", True),  # TheoremQA continuation
            ("16", "The answer is 9.\n\nProblem:\nFind f(3).\nSolution:\nThe answer is 16", False),
            ("9", "Question: how many are left?\nWe take 3 from 12, so the answer is 9.", True),  # a restated question first
            ("5", "The answer is 5.\nQ: Is that right?\nWait, no: the answer is 6.", False),  # a self-question that retracts
        ),
    ),
    Clause(
        "JSON_ANSWER_FIELD",
        'A JSON ``"answer"`` field, fenced or not, is a final-answer marker ranked after the answer tag; two different fields, a disagreeing box outside it, or a retraction after it take the credit away.',
        "extraction/extract",
        (
            ("36", '```json\n{"reasoning": "6*6 = 36", "answer": "36"}\n```', True),
            (r"\frac{3}{4}", '{"reasoning": "3 of 4 parts", "answer": "3/4"}', True),
            ("36", '{"answer": 36}', True),
            ("36", '{"answer": "\\\\boxed{36}"}', True),  # JSON-escaped LaTeX inside the field
            ("36", '{"answer": 12}', False),
            ("36", '{"answer": "36"}\n{"answer": "12"}', False),  # two different fields: ambiguous
            ("36", '{"answer": "36"} but then \\boxed{12}', False),  # a disagreeing box outside the field
            ("36", '{"answer": "36"}\nWait, that is wrong: it is 12.', False),  # a retraction after it
        ),
    ),
    Clause(
        "UNMARKED_CONCLUSIONS",
        "With no marker: a completion that is one math span; and, up to 4,000 characters, a finished closing computation line in a conclusion context, or a finished last sentence whose one number restates a computed value (one explanatory sentence after it is passed over); never a number only the question gave, a setup, a negation or a doubt.",
        "extraction/prose",
        (
            ("45", "The tank holds 5 * 9 = 45 liters when full.\nThe tank holds 45 liters.", True),
            ("120", "So the farmer sells 120 eggs in total. This is the number of eggs sold each week.", True),
            ("8", "$2^3 = 2 \\cdot 2 \\cdot 2 = 8$", True),
            ("70", "Convert back: b = 21 or b = 49.\n\nSum of all such bases: 21 + 49 = 70.", True),
            ("62", "The values are a = 3, b = 57, c = 2.\nTherefore\n\n a + b + c = 3 + 57 + 2 = 62.", True),
            ("3", "She buys 3 apples.", False),  # a number of the question, not a computed value
            ("45", "The tank holds 5 * 9 = 45 liters when full.\nThe tank holds 46 liters.", False),
            ("45", "The tank holds 5 * 9 = 45 liters.\nThe tank holds not 45 liters.", False),
            ("62", "Let a + b + c = 3 + 57 + 2 = 62.", False),  # a setup, not a conclusion
            ("62", "a + b + c = 3 + 57 + 2 = 62.", False),  # no conclusion word: an intermediate step
            ("120", "So the farmer sells 120 eggs in total. But wait, that is not right.", False),
        ),
    ),
    Clause(
        "SENTENCES_IN_MARKERS",
        "A sentence inside an answer line, ``<answer>`` tag or JSON field is read for its one value, past a leading condition that restates the question (no digit, variable or negation); a condition after the value, a case of a case split or two values is no answer.",
        "extraction/prose",
        (
            ("6", "Answer: If they share the stickers equally, each friend gets 6.", True),
            ("490", "<think>7 crates of 70</think> <answer> 7 * 70 = 490 oranges. </answer>", True),
            ("6", "<answer>Each friend gets 6 stickers.</answer>", True),
            ("6", "Answer: 6 stickers each, and 18 in total.", False),  # two values
            ("6", "Answer: 6 if n is odd", False),  # a condition after the value qualifies it
            ("6", "<answer>If n is odd, each gets 6.</answer>", False),  # one case of a case split
            ("6", "Answer: If they do not share, each gets 6.", False),
        ),
    ),
    Clause(
        "ORDINALS",
        "An ordinal suffix (``7^{\\text{th}}``, ``21st``) is presentation: the number is the answer.",
        "parsing/normalize",
        (
            ("7", r"She finishes in $\boxed{7^{\text{th}} \text{ place}}$.", True),
            ("21", r"\boxed{21st}", True),
            ("7", r"\boxed{8^{\text{th}} \text{ place}}", False),
            ("5000", r"\boxed{5 thousand}", True),  # "th" of a word is no suffix
        ),
    ),
    Clause(
        "FUNCTION_LABELS",
        "A function applied to numbers labels its value (``g(g(3)) = g(5) = 4`` states 4); an equation such as ``g(x) + 1 = 5`` states none.",
        "comparison/compare",
        (
            ("4", "Then $g(g(3)) = g(5) = 4$.", True),
            ("4", r"\boxed{f^{-1}(3) = 4}", True),
            ("5", "Then $g(g(3)) = g(5) = 4$.", False),  # an earlier link is never the answer
            ("5", r"\boxed{g(x) + 1 = 5}", False),  # an equation, not a label
        ),
    ),
    Clause(
        "CHECKS_AFTER_THE_ANSWER",
        "A check after the answer that confirms it (a verification opener, a confirmation word, no word of doubt) is no retraction, and ``This answer is correct.`` is no rival answer; a real retraction or contrast still takes the credit away.",
        "extraction/tail",
        (
            (
                "21",
                "The answer is $\\boxed{21}$. However, to be sure, let us check: 3 * 7 = 21, which confirms the answer.",
                True,
            ),
            ("5", "The answer is 5.\nThis answer is correct.\nThis answer is correct.", True),
            ("21", "The answer is $\\boxed{21}$. Wait, that is wrong: 3 * 8 = 24, so the answer is 24.", False),
            ("21", "The answer is $\\boxed{21}$. However, to be sure, let us check: 3 * 7 = 22, which is not 21.", False),
            ("21", "The answer is $\\boxed{21}$. However, n = 0 also works.", False),  # a real contrast
            ("5", "The answer is 5.\nThis answer is wrong.", False),
        ),
    ),
    Clause(
        "SAME_VALUE_BOXED_TWICE",
        "The same value boxed in two forms (``\\boxed{m = 2}`` and ``\\boxed{2}``) is one answer, not two.",
        "extraction/extract",
        (
            ("2", r"So $\boxed{m = 2}$, that is, $m$ equals $\boxed{2}$.", True),
            ("2", r"So $\boxed{m = 2}$, that is, $m$ equals $\boxed{3}$.", False),
            ("2", r"\boxed{x + y = 2} and \boxed{2}", False),  # an equation states no value
        ),
    ),
    Clause(
        "TRUTH_VALUES",
        "Yes/No answer a True/False gold (Yes = True, No = False).",
        "comparison/compare",
        (
            ("True", "Every such number is even, so the statement holds. The answer is Yes.", True),
            ("True", "The answer is No.", False),
            ("False", r"\boxed{no}", True),
            ("Yes", r"\boxed{True}", True),
            ("False", r"\boxed{True}", False),
        ),
    ),
    Clause(
        "SENTENCES_UNDER_A_BARE_MARKER",
        "The line under a bare ``Answer:`` (or an ``Answer`` heading) is read like the marker's own line: a sentence "
        "or a labelled noun phrase states its one number (``Tom would still have 8 marbles.``, ``Number of peaches in "
        "the basket = 52``, ``x = 27 bird families were left.``), past a currency sign and a computation before the "
        "value; two values, a negation, a hedge or a word that changes the number (``3 hundred``) is no answer.",
        "extraction/lines",
        (
            ("12", "She packs 3 * 4 = 12 jars.\nAnswer:\nThis morning, 12 jars are ready.", True),
            ("8", "12 - 4 = 8\nAnswer:\nTom would still have 8 marbles.", True),
            ("27", "35 - 8 = 27\nAnswer:\nx = 27 bird families were left.", True),
            ("52", "4 rows of 13 peaches.\nAnswer:\n\nNumber of peaches in the basket = 52", True),
            ("75", "30 trays x $2.5 = $75\n\nAnswer: The farmer will earn $75 by selling the eggs.", True),
            ("9", "14 + 31 = 45 dollars\n\nAnswer:\nTherefore, he can last for 45/5 = 9 weeks with the money.", True),
            ("5", "Answer:\nFree time left in his day = 24 hours - 10 hours - 9 hours = 5 hours", True),  # the last link
            ("6", "Answer:\nFree time left in his day = 24 hours - 10 hours - 9 hours = 5 hours", False),
            ("12", "She packs 3 * 5 = 15 jars.\nAnswer:\nThis morning, 15 jars are ready.", False),
            ("12", "3 * 4 = 12\nAnswer:\nThis morning, 12 jars are ready and 5 are empty.", False),  # two values
            ("12", "3 * 4 = 12\nAnswer:\nThis morning, 12 jars are not ready.", False),
            ("3", "Answer:\n3 hundred jars are ready.", False),  # a word that changes the number
            ("5", "Answer: 5 squared", False),
        ),
    ),
    Clause(
        "CHOICE_LETTERS",
        "A letter followed by its option's text (``D (16)``, ``A (\\frac{3}{7})``, ``B (No)``) is that letter, and so "
        "is a parenthesised letter stated as a finished last sentence's predicate (``The ratio of AB to AC is (B) "
        "3/4.``). A letter gold is decided by the final letter: a value stated beside one letter (``\\boxed{84}`` then "
        "``The answer is (C).``) is passed over; a value after the last letter, several letters, a hedge or a condition "
        "are no letter answer.",
        "choices",
        (
            ("D", "Each side is 4, so the perimeter is 16.\nSo the answer is D (16).", True),
            ("A", "Thus, the answer is A (\\frac{3}{7}).", True),
            ("B", "The statement fails for n = 2.\nThe answer is B (No).", True),
            ("B", "The perimeter is 16.\nThe answer is C (16).", False),
            ("B", "Dividing gives the ratio.\nThe ratio of AB to AC is (B) 3/4.", True),
            ("B", "Dividing gives the ratio.\nThe ratio of AB to AC is (B) 3/4 if x > 0.", False),
            ("C", "The three parts add up to \\boxed{84}.\n\nThe answer is (C).", True),
            ("C", "The three parts add up to \\boxed{84}.\n\nThe answer is (E).", False),
            ("C", "\\boxed{B}\n\nThe answer is (C).", False),  # two letters
            ("C", "The three parts add up to \\boxed{84}.\n\nThe answer is (C) or (D).", False),
            ("G", "The closest option: the answer is (G).\n\nHowever, the answer should be closer to -0.69.", False),
            ("G", "The answer is (G).\n\nActually, the answer is 0.69.", False),  # a value after the last letter
        ),
    ),
    Clause(
        "CHOICES_OF_THE_TASK",
        "With the task's ``choices``, a letter and its option's value are one answer: the value alone picks its "
        "option, a box beside the agreeing letter is no rival, a letter written out with its option's text word for "
        "word is that letter, and a letter gives its value to a value gold; a letter written with another option's "
        "value, or another option's value beside a letter, is a rival pair (ambiguous); a value no option is known "
        "to equal is passed over when the letter is stated last.",
        "choices",
        (
            ("C", "The parts add up to \\boxed{84}.\n\nThe answer is (C).", True),
            ("C", "The parts add up to 84.\nThe answer is 84.", True),
            ("C", "The answer is C (84).", True),
            ("C", "The answer is C (90).", False),  # the letter and the value name two options
            ("C", "The parts add up to \\boxed{90}.\n\nThe answer is (C).", False),  # 90 is option D: a rival
            ("C", "The parts add up to \\boxed{80}, nearest (C).\n\nThe answer is (C).", True),  # 80 is no option
            ("C", "The answer is (C).\n\nSo the answer is 80.", False),  # a value after the letter
            ("C", "The answer is 90.", False),
            ("84", "The answer is (C).", True),
            ("84", "The answer is (D).", False),
        ),
        choices=("30", "45", "84", "90", "120"),
    ),
    Clause(
        "VALUE_GOLDS_AMONG_OPTIONS",
        "A gold that is an option's text (MathVista) names that option: a letter, the letter with its text, or the text "
        "picks it, and another option is wrong even when its value is equal as arithmetic; a range written low - high "
        "(``0.0 - 0.2``) is compared as written, never as the difference ``-0.2``.",
        "choices",
        (
            ("0.0 - 0.2", "From the chart, the range is the first one.\nThe answer is A.", True),
            ("0.0 - 0.2", "Thus, the answer is A (0.0 - 0.2).", True),
            ("0.0 - 0.2", "The answer is 0.0 - 0.2.", True),
            ("0.0 - 0.2", "The answer is C.", False),
            ("0.0 - 0.2", "Thus, the answer is C (0.4 - 0.6).", False),  # -0.2 as arithmetic, like the gold: no
            ("0.0 - 0.2", "The answer is 0.4 - 0.6.", False),
            ("0.0 - 0.2", "The answer is -0.2.", False),
        ),
        choices=("0.0 - 0.2", "0.2 - 0.4", "0.4 - 0.6", "0.6 - 0.8", "0.8 - 1.0"),
    ),
    Clause(
        "PROSE_CONCLUSIONS",
        "A finished last sentence that restates a computed value reads past a step label (``Step 3:``), numbers that "
        "restate a condition of the question and appear before it (``40 miles in 8 hours``), and the words of a "
        "difference the working computed (``22 inches farther than``, ``5 more cups``); never a difference with no "
        "working, another comparison or bound (``3 times``, ``at least``) or a ratio (``1 in 6``). A closing check "
        "that names the value again, with no word of doubt (``Check: 45 - 15 = 30.``), is no rival answer.",
        "extraction/prose",
        (
            ("40", "She walks 5 miles each hour, 5 * 8 = 40.\nTherefore, she can walk 40 miles in 8 hours.", True),
            ("40", "She walks 4 miles each hour, 4 * 8 = 32.\nTherefore, she can walk 32 miles in 8 hours.", False),
            ("8", "She walks 5 miles each hour, 5 * 8 = 40.\nTherefore, she can walk 40 miles in 8 hours.", False),
            ("22", "Ann: 60 inches, Ben: 38 inches, 60 - 38 = 22.\nStep 3: Ann jumped 22 inches farther than Ben.", True),
            ("22", "Ann jumped 22 inches farther than Ben.", False),  # a comparison with no working
            ("22", "60 - 38 = 22.\nAnn jumped 22 inches farther than 3 times Ben's jump.", False),
            ("5", "12 - 7 = 5\nShe needs 5 more cups of sugar.", True),
            ("32", "5 x 4 = 20 and 3 x 4 = 12.\nTherefore, Gwen has a total of 20 + 12 = 32 books.", True),
            ("1", "The die has 6 faces, 6 / 6 = 1.\nThe chance is 1 in 6 throws.", False),
            ("45", "30 + 15 = 45.\nSo she has 45 books.\nCheck: 45 - 15 = 30, which matches.", True),
            ("45", "30 + 15 = 45.\nSo she has 45 books.\nCheck: 45 - 15 = 31, which is wrong.", False),
            ("27", "Kael: 10 apples + 4 oranges = 14 fruits\n\nTotal fruits: 13 + 14 = 27 fruits", True),  # a unit: finished
            ("27", "Total fruits: 13 + 14 = 27 fruits or more", False),
            ("93000", "Total number of posts = 1000 x 3 x 31 = 93,000 posts", True),  # x between numbers multiplies
            ("1430", "Total cost = 500 + 800 + 130 = 1430\n\nTherefore, Janet paid $1430 for the brooch.", True),
        ),
    ),
    Clause(
        "SOLUTION_AND_NEXT_LINE_MARKERS",
        "``Solution:`` above one closing statement (all that follows it: one finished line with no plan or setup "
        "word) marks the answer, and an answer phrase that ends its line (``the correct answer is:``) states the "
        "next line; a ``Solution:`` that opens working is no marker.",
        "extraction/lines",
        (
            ("17", "Solution:\n\nMarco has 17 marbles now.", True),
            ("17", "Solution:\nMarco has 18 marbles now.", False),
            ("17", "Solution:\nFirst, we find how many marbles 17 bags hold.", False),
            ("17", "Solution:\nLet the number of marbles be 17.", False),
            ("C", "Both statements are false. Therefore, the correct answer is:\nC. False, False", True),
            ("12", "So the answer is:\n12", True),
            ("12", "So the answer is:\n13", False),
        ),
    ),
)
