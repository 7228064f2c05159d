"""A labelled corpus of realistic math completions for the recall benchmark (``verifier_recall_bench.py``).

Sources (every completion is our own minimal re-writing of a *kind* of output, not a copy):
    * **MATH / Minerva** (Hendrycks et al. 2021; Lewkowycz et al. 2022): golds stored as worked
      solutions ending in ``\\boxed{}``; the few-shot closing line ``Final Answer: The final answer is
      $X$. I hope it is correct.``; LaTeX answers (fractions, radicals, intervals, matrices, degrees).
    * **NuminaMath-CoT / NuminaMath-TIR** (Numina 2024): chain of thought that ends with
      ``Thus, the answer is $\\boxed{X}$`` or ``The final answer is \\(\\boxed{X}\\)``, Chinese-origin
      problems (``所以答案是``), choice letters written ``\\textbf{(C)}``, dollar amounts, units.
    * **OpenThoughts / Bespoke-Stratos / DeepSeek-R1 distills**: ``<|begin_of_thought|>`` or
      ``<think>`` reasoning with tentative answers, then a solution ending ``**Final Answer**``
      and a displayed ``\\[\\boxed{X}\\]``.
    * **Llama / Qwen instruct evaluations**: ``Therefore, the final answer is: $\\boxed{X}$. I hope it
      is correct.``, markdown/emoji answer labels (``**Answer:** X``, ``🎯 **Final answer:** X``).
    * **GSM8K-style** fine-tunes: a final ``#### X`` line; R1-style ``<answer>`` tags.
    * **Math-Verify's regression tests** (huggingface/Math-Verify ``tests/``: number, relation, matrix,
      boxed, NuminaMath and OpenThoughts tables): the *classes* its pairs exercise, re-written with
      other numbers and words (``SPECIAL_MV``): chains whose last link is the value, boxed intermediate
      results before a closing ``Final Answer:`` line, a Minerva closing line run into the previous
      sentence, a display block after ``Answer``, matrix sums and products in a sentence, a last
      sentence stating one relation or one value after "Therefore", ``|z|`` bands as unions,
      reordered nested radicals.
    * **MATH's answer-equivalence unit tests** (Hendrycks et al.'s ``is_equiv`` tests as shipped by
      math-evaluation harnesses, e.g. ZubinGou/math-evaluation-harness): placeholder units, dollar
      signs, ``\\left( \\right)`` products, ``.1``, ``\\frac34i``, ``\\tfrac83``, a factored polynomial
      reordered, a partly double-escaped fraction sum, non-proportional plane equations; and the
      self-tests of the Qwen2.5-Math / ToRA ``grader.py`` (``math_equal``): decimals against exact
      tuples, a plane equation times -1, a matrix wrapped in parentheses, ``\\sec^2`` vs ``\\tan^2 + 1``,
      and the near misses those graders' relative tolerance credits (``SPECIAL_EQUIV``).
    * **Prose answers** of olympiad-style sets (NuminaMath, OpenThoughts): yes/no sentences and
      named outcomes compared word for word (``SPECIAL_PROSE``).
    * **Red-team, written here** (math-1.3.1, ``SPECIAL_REDTEAM``): wrong outputs shaped to farm the
      reward (a final answer taken back after it, a final-answer label cut off empty, an answer asked
      as a question, a hypothetical "suppose the answer is", two values in one conclusion, two
      statements chained by ``\Rightarrow``, a different unit power, dollars vs percent, degrees vs
      radians, a number trailed by ``\ldots``) and the right answers those rules must keep crediting.

Wrong rows are the mistakes such models make: a wrong value, a sign or off-by-one error, hedging
between values, more boxes than the answer has parts, a truncated or empty final box after a
retracted answer, an unclosed final ``<answer>``, an answer only inside the reasoning, a different
unit, a rounded value for an exact gold, a rescaled percent, a wrong interval bracket, a partial
list of solutions, a wrong choice letter.

Each row: ``(id, source, gold, completion, expected)``. ``rows()`` builds the full list (a few
hundred rows) deterministically from ``ITEMS`` (one problem, its gold as the dataset stores it, right
forms and wrong forms of the final answer) times the completion styles, plus ``SPECIAL`` rows.
"""

from __future__ import annotations

# (source, gold as stored, short working, [right final-answer forms], [wrong final-answer forms])
ITEMS: list[tuple[str, str, str, list[str], list[str]]] = [
    ("math", "12", "We have $3 \\cdot 4 = 12$.", ["12", "12.0", "12 \\text{ apples}"], ["13", "-12"]),
    (
        "math",
        "\\frac{1}{2}",
        "The probability is $\\frac{3}{6}$.",
        ["\\frac12", "0.5", "\\dfrac{1}{2}", "1/2"],
        ["\\frac13", "2"],
    ),
    ("math", "-\\frac{3}{4}", "Solving gives $x=-3/4$.", ["-\\frac{3}{4}", "-0.75", "\\frac{-3}{4}"], ["\\frac34", "-\\frac43"]),
    ("math", "2\\sqrt{3}", "The side is $\\sqrt{12}$.", ["2\\sqrt3", "\\sqrt{12}", "2 \\sqrt{3}"], ["3\\sqrt2", "3.46"]),
    (
        "math",
        "\\frac{\\sqrt{3}}{2}",
        "Since the angle is $60^\\circ$.",
        ["\\frac{\\sqrt3}{2}", "\\dfrac{\\sqrt{3}}{2}"],
        ["\\frac12", "0.87"],
    ),
    ("math", "\\pi", "The area is $\\pi r^2$ with $r=1$.", ["\\pi"], ["3.14", "2\\pi"]),
    (
        "math",
        "\\frac{5}{2}\\pi",
        "The arc has length $\\frac{5\\pi}{2}$.",
        ["\\frac{5\\pi}{2}", "\\frac52\\pi", "2.5\\pi"],
        ["\\frac{5}{3}\\pi"],
    ),
    ("math", "45^\\circ", "The triangle is isosceles and right.", ["45", "45^\\circ", "45^{\\circ}"], ["135^\\circ", "30"]),
    (
        "math",
        "[3, \\infty)",
        "The inequality holds for $x \\ge 3$.",
        ["[3, \\infty)", "[3, +\\infty)", "x \\ge 3"],
        ["(3, \\infty)", "x > 3"],
    ),
    (
        "math",
        "(-\\infty, 4)",
        "We need $x - 4 < 0$.",
        ["(-\\infty, 4)", "x < 4", "\\left(-\\infty, 4\\right)"],
        ["(-\\infty, 4]", "x > 4"],
    ),
    (
        "math",
        "(-2, 5]",
        "Combining both conditions.",
        ["(-2, 5]", "-2 < x \\le 5", "\\left( -2, 5 \\right]"],
        ["[-2, 5]", "(-2, 5)"],
    ),
    ("math", "(4, 1)", "Substituting back, $b = 1$.", ["(4, 1)", "(4,1)", "a=4, b=1"], ["(1, 4)", "(4, -1)"]),
    ("math", "(a, b) = (4, 1)", "So $a = 4$ and $b = 1$.", ["(4, 1)", "a = 4, b = 1"], ["(1, 4)"]),
    (
        "math",
        "\\{1, 3\\}",
        "The solutions are 1 and 3.",
        ["\\{1, 3\\}", "\\{3, 1\\}", "1, 3", "3, 1"],
        ["\\{1\\}", "\\{1, 3, 5\\}"],
    ),
    (
        "math",
        "2, 5",
        "Factoring, $(x-2)(x-5)=0$.",
        ["2, 5", "5, 2", "x = 2, x = 5", "2 \\text{ and } 5"],
        ["2", "2, 5, 7", "-2, -5"],
    ),
    (
        "math",
        "\\begin{pmatrix} 2 & 0 \\\\ 1 & 3 \\end{pmatrix}",
        "Multiplying the matrices.",
        ["\\begin{pmatrix} 2 & 0 \\\\ 1 & 3 \\end{pmatrix}", "\\begin{bmatrix} 2 & 0 \\\\ 1 & 3 \\end{bmatrix}"],
        ["\\begin{pmatrix} 2 & 1 \\\\ 0 & 3 \\end{pmatrix}"],
    ),
    (
        "math",
        "\\begin{pmatrix} -1 \\\\ 4 \\end{pmatrix}",
        "The vector is the difference.",
        ["\\begin{pmatrix} -1 \\\\ 4 \\end{pmatrix}", "\\begin{pmatrix}-1\\\\4\\end{pmatrix}"],
        ["\\begin{pmatrix} 4 \\\\ -1 \\end{pmatrix}"],
    ),
    (
        "math",
        "y = 2x + 1",
        "The slope is 2 and the intercept 1.",
        ["y = 2x + 1", "y = 1 + 2x", "2x - y + 1 = 0"],
        ["y = 2x - 1", "y = x + 1"],
    ),
    ("math", "x^2 + 2x + 1", "Expanding the square.", ["(x+1)^2", "x^2+2x+1", "1 + 2x + x^2"], ["(x-1)^2", "x^2 + 1"]),
    ("math", "1024", "Doubling ten times.", ["1024", "2^{10}", "1,024"], ["512", "2^{9}"]),
    ("math", "1000000", "There are $10^6$ codes.", ["10^6", "1,000,000", "1000000"], ["100000", "10^5"]),
    ("math", "\\text{(C)}", "Checking each option, only (C) works.", ["C", "(C)", "\\text{(C)}", "\\textbf{(C)}"], ["B", "(D)"]),
    ("math", "\\text{Monday}", "Counting 15 days forward.", ["\\text{Monday}", "Monday"], ["\\text{Tuesday}"]),
    (
        "math",
        "8\\text{ kg}",
        "The mass is $8$ kilograms.",
        ["8", "8 \\text{ kg}", "8\\text{ kilograms}"],
        ["8 \\text{ g}", "80 \\text{ kg}"],
    ),
    ("math", "40", "Distance equals speed times time.", ["40", "40 \\text{ km}", "40\\textnormal{ km}"], ["4", "400"]),
    ("math", "18.90", "Adding the prices.", ["18.90", "\\$18.90", "18.9"], ["18.09", "19"]),
    ("math", "25\\%", "A quarter of the students.", ["25\\%", "25", "0.25"], ["2.5\\%", "75\\%"]),
    ("math", "\\frac{3}{4}", "Three of the four cases.", ["\\cfrac{3}{4}", "0.75", "\\tfrac34"], ["\\frac43", "0.7"]),
    ("math", "|AB| = 5", "By the Pythagorean theorem.", ["5", "|AB| = 5"], ["25", "\\sqrt{5}"]),
    ("math", "k = 45, n = 2", "Matching coefficients.", ["(45, 2)", "k=45, n=2"], ["(2, 45)", "k = 45, n = 3"]),
    ("numina", "7", "Adding the two numbers, $3 + 4 = 7$.", ["7", "7.0", "x = 7"], ["8", "-7"]),
    ("numina", "36", "The number of handshakes is $\\binom{9}{2}$.", ["36", "\\binom{9}{2}"], ["72", "45"]),
    (
        "numina",
        "\\dfrac{\\sqrt{5}-1}{2}",
        "The positive root of $x^2+x-1=0$.",
        ["\\frac{\\sqrt5-1}{2}", "\\frac{-1+\\sqrt{5}}{2}"],
        ["\\frac{\\sqrt5+1}{2}"],
    ),
    ("numina", "x = -1", "Setting the derivative to zero.", ["-1", "x=-1"], ["1", "x = 1"]),
    ("numina", "-6", "The product of the roots is $c/a$.", ["-6", "- 6"], ["6", "-5"]),
    (
        "numina",
        "\\frac{1}{6}",
        "One favourable outcome of six.",
        ["\\frac{1}{6}", "1/6", "\\frac{2}{12}"],
        ["\\frac{1}{36}", "0.16"],
    ),
    ("numina", "B", "Options A, C and D fail.", ["B", "\\text{B}", "(B)", "\\mathrm{B}"], ["D", "A"]),
    (
        "numina",
        "2\\sqrt{2}",
        "The diagonal of the unit... scaled by 2.",
        ["2\\sqrt2", "\\sqrt{8}", "2\\sqrt{2}"],
        ["\\sqrt{2}", "4"],
    ),
    ("numina", "120", "There are $5!$ orders.", ["120", "5!"], ["24", "60"]),
    ("numina", "3", "The remainder on division by 7.", ["3"], ["4", "10"]),
    ("numina", "\\infty", "The series diverges.", ["\\infty", "+\\infty"], ["0", "-\\infty"]),
    ("numina", "0.\\overline{3}", "One third as a decimal.", ["\\frac{1}{3}", "0.\\overline{3}"], ["0.3", "0.33"]),
    ("openthoughts", "250", "Half of 500 is 250.", ["250", "250.0"], ["500", "25"]),
    ("openthoughts", "\\frac{7}{3}", "Solving the linear equation.", ["\\frac73", "2\\frac13", "7/3"], ["\\frac37", "2.33"]),
    ("openthoughts", "4\\sqrt{2}", "The distance between the points.", ["4\\sqrt2", "\\sqrt{32}"], ["2\\sqrt{2}", "5.66"]),
    (
        "openthoughts",
        "\\frac{\\pi}{4}",
        "The angle whose tangent is 1.",
        ["\\frac{\\pi}{4}", "\\frac\\pi4", "\\pi/4"],
        ["\\frac{\\pi}{2}"],
    ),
    ("openthoughts", "e^2", "Evaluating the limit.", ["e^2", "e^{2}"], ["e", "2e"]),
    ("openthoughts", "\\ln 2", "The integral of $1/x$ from 1 to 2.", ["\\ln 2", "\\ln(2)"], ["\\ln 3", "1"]),
    ("openthoughts", "2016", "The year in question.", ["2016", "2,016"], ["2015", "2017"]),
    (
        "openthoughts",
        "-\\frac{1}{3}",
        "The slope of the perpendicular line.",
        ["-\\frac13", "-1/3", "\\frac{-1}{3}"],
        ["\\frac{1}{3}", "-3"],
    ),
    (
        "openthoughts",
        "12\\sqrt{3}",
        "Six equilateral triangles of side 2.",
        ["12\\sqrt3", "\\sqrt{432}"],
        ["6\\sqrt{3}", "20.78"],
    ),
    (
        "openthoughts",
        "x \\in (1, 3)",
        "The quadratic is negative between its roots.",
        ["(1, 3)", "1 < x < 3"],
        ["[1, 3]", "x < 3"],
    ),
    ("llama", "9", "Let me add: $4 + 5 = 9$.", ["9", "9.00"], ["10", "8"]),
    ("llama", "42", "The answer to the sum.", ["42"], ["24", "41"]),
    ("llama", "\\$1.50", "Each pencil costs a dollar fifty.", ["1.50", "\\$1.50", "1.5"], ["15", "1.05"]),
    ("llama", "6\\%", "The rate of increase.", ["6\\%", "6", "0.06"], ["0.6\\%", "60"]),
    ("llama", "\\frac{2}{3}", "Two of three outcomes.", ["\\frac23", "\\frac{4}{6}"], ["0.67", "\\frac{3}{2}"]),
    ("gsm8k", "18", "Janet sells 16 - 3 - 4 = 9 eggs for $2 each: 9 * 2 = 18.", ["18", "18.00", "\\$18"], ["9", "16"]),
    ("gsm8k", "3", "It takes 2 + 1 = 3 bolts.", ["3"], ["2", "4"]),
    ("gsm8k", "70000", "The profit is 70,000 dollars.", ["70000", "70,000", "\\$70,000"], ["7000", "170000"]),
    ("gsm8k", "540", "He runs 3 * 3 * 60 = 540 meters.", ["540", "540 \\text{ meters}"], ["180", "54"]),
    ("gsm8k", "20", "20 cups of feed.", ["20", "20 \\text{ cups}"], ["15", "40"]),
]

# completion styles: (name, template) with {work} and {ans}
STYLES: list[tuple[str, str]] = [
    ("minerva", "{work}\nFinal Answer: The final answer is ${ans}$. I hope it is correct."),
    ("numina_boxed", "{work}\n\nThus, the answer is $\\boxed{{{ans}}}$."),
    ("numina_paren", "{work}\n\nThe final answer is \\(\\boxed{{{ans}}}\\)."),
    (
        "openthoughts",
        "<|begin_of_thought|>\n\nOkay, so I need to solve this. {work} Wait, let me double-check that. "
        "Yes, that seems right.\n\n<|end_of_thought|>\n\n<|begin_of_solution|>\n\n{work}\n\n"
        "**Final Answer**\n\\[\n\\boxed{{{ans}}}\n\\]\n\n<|end_of_solution|>",
    ),
    ("r1", "<think>\nLet me think. {work} Hmm, so that gives it.\n</think>\n\n{work}\n\n$$\\boxed{{{ans}}}$$"),
    (
        "llama",
        "## Step 1: Set up\n{work}\n\n## Step 2: Conclude\nTherefore, the final answer is: $\\boxed{{{ans}}}$. I hope it is correct.",
    ),
    ("markdown_label", "{work}\n\n**Answer:** ${ans}$"),
    ("emoji_label", "{work}\n\n🎯 **Final answer:** ${ans}$"),
    ("display_label", "{work}\n\nAnswer \\[ {ans} \\]"),
    ("phrase", "{work} So the answer is ${ans}$."),
    ("chinese", "{work}\n所以答案是 $\\boxed{{{ans}}}$。"),
    ("gsm8k", "{work}\n#### {ans}"),
    ("answer_tag", "<think>{work}</think>\n<answer>{ans}</answer>"),
    ("heading", "{work}\n\n### Final Answer\n\n$\\boxed{{{ans}}}$"),
]

# hand-written rows for the extraction-policy classes: (source, gold, completion, expected)
SPECIAL: list[tuple[str, str, str, bool]] = [
    ("math", "Adding gives $2+5=7$, so the answer is $\\boxed{7}$.", "The total is $\\boxed{7}$.", True),
    (
        "math",
        "Since $x^2=16$ and $x>0$, $x=\\boxed{4}$.",
        "Taking the positive root, $x = 4$.\nFinal Answer: The final answer is $4$. I hope it is correct.",
        True,
    ),
    ("math", "We get $\\boxed{\\frac{1}{2}}$.", "The answer is $\\boxed{0.5}$", True),
    ("math", "We get $\\boxed{\\frac{1}{2}}$.", "The answer is $\\boxed{0.6}$", False),
    ("numina", "7", "The problem asks me to put the answer in \\boxed{}. 3 + 4 = 7, so the answer is 7.", True),
    ("numina", "7", "Put the final answer in \\boxed{}.\n\nWe compute 3 + 4 = 7.\n\n**Answer:** 7", True),
    ("numina", "2, 5", "The roots are $\\boxed{2}$ and $\\boxed{5}$.", True),
    ("numina", "2, 5", "The roots are $x = \\boxed{5}$ and $x = \\boxed{2}$.", True),
    ("numina", "2, 5", "The roots are $\\boxed{2}$, $\\boxed{5}$ or maybe $\\boxed{7}$.", False),
    ("numina", "5", "It could be $\\boxed{5}$ or $\\boxed{6}$.", False),
    ("numina", "5", "The answer is either 5 or 6.", False),
    ("numina", "5", "The answer is one of 4, 5 or 6.", False),
    ("numina", "5", "I think the answer might be 5?", False),
    ("math", "6", "First I get $\\boxed{6}$. Hmm, that misses a case; recounting, the answer is $\\boxed{\\frac{13}{", False),
    ("math", "2", "I think it is $\\boxed{2}$. On reflection the answer is $\\boxed{}$", False),
    ("r1", "9", "<answer>9</answer>\nActually I made an error.\n<answer>1", False),
    ("r1", "9", "<think>Let me compute.</think>\n<answer>9", True),
    ("r1", "5", "<think>So the answer is \\boxed{5}.</think>\nI am not sure any more.", False),
    ("r1", "5", "<think>So the answer is 5.</think>\n<answer>I cannot tell.</answer>", False),
    ("openthoughts", "5", "<think>\nMaybe it is \\boxed{4}... no wait, 2+3=5.\n</think>\n\nThe sum is $\\boxed{5}$.", True),
    ("openthoughts", "5", "<think>\nIt is 5.\n</think>\n\nThe sum is $\\boxed{4}$.", False),
    ("math", "12", "Answer: 12\n\nBut wait, recomputing gives 13.\n\nAnswer: 13", False),
    ("math", "12", "\\boxed{12}\n\nAnswer: 13", False),
    ("math", "12", "So $x = \\boxed{12}$.\n\nAnswer: 12", True),
    ("math", "\\pi", "$\\boxed{3.14159}$", False),
    ("math", "50\\%", "$\\boxed{5000}$", False),
    ("math", "50\\%", "$\\boxed{0.05}$", False),
    ("math", "1331 and 1728", "The cubes are $\\boxed{1728}$ and $\\boxed{1331}$.", True),
    ("math", "1331 and 1728", "The cube is $\\boxed{1728}$.", False),
    ("math", "\\frac{1}{2}", "We get $\\\\boxed{\\\\frac{1}{2}}$.", True),
    ("math", "\\frac{1}{2}", "We get $\\\\boxed{\\\\frac{1}{3}}$.", False),
    ("math", "10", "The result is \\fbox{10}.", True),
    ("math", "10", "The answer is \\boxed 10.", True),
    ("math", "10", "Put the answer in \\boxed and explain.", False),
    ("llama", "x = 3", "## Step 3\nSolve for $x$.\n\nThe final answer is: $\\boxed{3}$", True),
    ("llama", "3", "The final answer is: $\\boxed{x=3}$", True),
    ("llama", "3", "The final answer is: $\\boxed{x=4}$", False),
    ("gsm8k", "18", "She makes 9 * 2 = $18.\n#### 18", True),
    ("gsm8k", "18", "She makes 9 * 2 = $16.\n#### 16", False),
    ("numina", "\\text{B}", "故选 $\\boxed{B}$。", True),
    ("numina", "\\text{B}", "故选 $\\boxed{C}$。", False),
    ("numina", "\\textbf{(C) }12", "$\\boxed{\\textbf{(C) }12}$", True),
    ("numina", "\\textbf{(C) }12", "$\\boxed{\\textbf{(D) }15}$", False),
]


# the classes of Math-Verify's regression tables, re-written (source, gold, completion, expected)
SPECIAL_MV: list[tuple[str, str, str, bool]] = [
    ("mv", "y = 14", "$\\boxed{y = 6+6+2 = 9 = 14}$", True),
    ("mv", "14", "$\\boxed{y = 6+6+2 = 9 = 14}$", True),
    ("mv", "9", "$\\boxed{y = 6+6+2 = 9 = 14}$", False),
    ("mv", "14", "$\\boxed{6 + 6 + 2 = 14}$", True),
    ("mv", "2 = \\www = t = 5", "$\\boxed{5}$", True),
    ("mv", "8", "So $x + y = 8$ gives $\\boxed{x + y = 8}$.", False),
    (
        "mv",
        "6630",
        "The first account earns $0.02 \\cdot 6000 = \\boxed{120}$ so it holds $6,120. The second adds "
        "$\\boxed{510}$ so the total is $6,630. Final Answer: The final answer is $6,630$. I hope it is correct.",
        True,
    ),
    (
        "mv",
        "510",
        "The first account earns $0.02 \\cdot 6000 = \\boxed{120}$ so it holds $6,120. The second adds "
        "$\\boxed{510}$ so the total is $6,630. Final Answer: The final answer is $6,630$. I hope it is correct.",
        False,
    ),
    (
        "mv",
        "84",
        "The box has volume $7 \\times 4 \\times 3 = 84$. Final Answer: The volume of $PQRS$ is 84. I hope it is correct.",
        True,
    ),
    (
        "mv",
        "85",
        "The box has volume $7 \\times 4 \\times 3 = 84$. Final Answer: The volume of $PQRS$ is 84. I hope it is correct.",
        False,
    ),
    ("mv", "5", "So $t = 5$. Final Answer: Sam planted the tree 5 years ago. I hope it is correct.<|im_start|>user", True),
    ("mv", "5", "Final Answer: Sam planted 5 more trees than Ann.", False),
    ("mv", "16", "Answer \\[\n 16 \n\\]", True),
    ("mv", "16", "Answer $$\n 17 \n$$", False),
    ("mv", "\\frac{7}{5}", "Answer $ \\frac{1}{5} \\$ = \\frac{7}{5} $", True),
    (
        "mv",
        "\\begin{pmatrix} 3 & 3 \\\\ 5 & 9 \\end{pmatrix}",
        "Adding them, the result is $\\begin{pmatrix} 1 & 0 \\\\ 2 & 4 \\end{pmatrix} + \\begin{pmatrix} 2 & 3 \\\\ 3 & 5 \\end{pmatrix}$",
        True,
    ),
    (
        "mv",
        "\\begin{pmatrix} 3 & 3 \\\\ 5 & 9 \\end{pmatrix}",
        "Adding them, the result is $\\begin{pmatrix} 1 & 0 \\\\ 2 & 4 \\end{pmatrix} - \\begin{pmatrix} 2 & 3 \\\\ 3 & 5 \\end{pmatrix}$",
        False,
    ),
    (
        "mv",
        "\\begin{pmatrix} 2 & 1 \\\\ 4 & 3 \\end{pmatrix}",
        "The product is $\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix} \\begin{pmatrix} 4 & 3 \\\\ 2 & 1 \\end{pmatrix}$",
        True,
    ),
    (
        "mv",
        "\\begin{pmatrix} 5 & 6 \\\\ 7 & 8 \\end{pmatrix}",
        "The matrix we want is $ \\begin{pmatrix}5 & 6 \\\\ 7 & 8\\end{pmatrix} $.",
        True,
    ),
    ("mv", "y \\le 7", "Hence $y \\le 7$ is the solution set.", True),
    ("mv", "y \\le 7", "Hence $y < 7$ is the solution set.", False),
    ("mv", "t \\neq 2", "We conclude that $t \\ne 2$.", True),
    ("mv", "5", "So far the sum is $5$. Next we check the remaining cases", False),
    (
        "mv",
        "3/4",
        "Q = (1/2) / (2/3) = 3/4 Therefore, the chance that the red ball is drawn first is 3/4. <|im_start|>user",
        True,
    ),
    ("mv", "3/4", "Therefore, the chance that the red ball is drawn first is not 3/4.", False),
    ("mv", "9", "Checking each case. Therefore, there are 9 valid colorings of the given board. I hope it is correct.", True),
    ("mv", "9", "Checking each case. Therefore, there are 9 more colorings than before.", False),
    ("mv", "(2,5)", "From $y = 5$ we get $x = 2$. So, the solution $(x, y)$ of the system is $(2, 5)$.", True),
    ("mv", "(2,5)", "From $y = 5$ we get $x = 2$. So, the solution $(x, y)$ of the system is $(5, 2)$.", False),
    ("mv", "5", "Counting again, so we get 5", False),
    ("mv", "2 \\le |w| \\le 3", "$\\boxed{w \\in [-3, -2] \\cup [2, 3]}$", True),
    ("mv", "2 \\le |w| \\le 3", "$\\boxed{w \\in [2, 3]}$", False),
    ("mv", "\\frac{\\sqrt{2+\\sqrt{7}}}{9+4\\sqrt{5}}", "$\\boxed{\\frac{\\sqrt{\\sqrt{7}+2}}{4\\sqrt{5}+9}}$", True),
    ("mv", "\\frac{\\sqrt{2+\\sqrt{7}}}{9+4\\sqrt{5}}", "$\\boxed{\\frac{\\sqrt{\\sqrt{7}+2}}{4\\sqrt{5}+8}}$", False),
    ("mv", "(2,5,7)", "The final answer is $\\boxed{{2,5,7}}$.", True),
    ("mv", "(2,5,7)", "The final answer is $\\boxed{{5,2,7}}$.", False),
    ("mv", "(2,5)", "The final answer is $\\boxed{{2,5}}$.", False),
    ("mv", "\\{2, 5, 7\\}", "The final answer is $\\boxed{(7, 2, 5)}$.", True),
    ("mv", "1 - \\frac{1}{\\mathrm{e}}", "$\\boxed{1 + \\frac{1}{\\mathrm{e}}}$", False),
    ("mv", "x \\in [-3, 4]", "$\\boxed{-3 \\le x \\le 4}$", True),
]
# the classes of MATH's answer-equivalence unit tests, re-written
SPECIAL_EQUIV: list[tuple[str, str, str, bool]] = [
    ("equiv", "24\\text{ units}", "$\\boxed{24}$", True),
    ("equiv", "24\\text{ units}", "$\\boxed{240}$", False),
    ("equiv", "36 square units", "$\\boxed{36}$", True),
    ("equiv", "15", "$\\boxed{\\$15}$", True),
    ("equiv", "\\left(y-3\\right)\\left(y+3\\right)", "$\\boxed{(y-3)(y+3)}$", True),
    ("equiv", "\\left(y-3\\right)\\left(y+3\\right)", "$\\boxed{(y-3)^2}$", False),
    ("equiv", "0.3", "$\\boxed{.3}$", True),
    ("equiv", "\\frac52i", "$\\boxed{\\frac{5}{2}i}$", True),
    ("equiv", "\\tfrac95", "$\\boxed{\\frac{9}{5}}$", True),
    ("equiv", "3w^{5}(2+3w^{5})", "$\\boxed{3w^5(3w^5+2)}$", True),
    ("equiv", "\\tfrac{1}{3} +\\! \\frac1{45}", "$\\boxed{\\\\dfrac{1}{3} +\\frac{1}{45}}$", True),
    ("equiv", "\\tfrac{1}{3} + \\frac1{45}", "$\\boxed{\\\\frac{1}{3} + 1/4}$", False),
    ("equiv", "3x - 2y + 5z + 1 = 0", "$\\boxed{x + y + z + 1 = 0}$", False),
    ("equiv", "3x - 2y + 5z + 1 = 0", "$\\boxed{6x - 4y + 10z + 2 = 0}$", True),
    ("equiv", "8\\sqrt{5} + \\sqrt9", "$\\boxed{8\\sqrt5 + 3}$", True),
    ("grader", "(2,3.5)", "$\\boxed{(2,\\frac{7}{2})}$", True),
    ("grader", "\\frac{y}{5}+\\frac{3}{5}", "$\\boxed{\\frac{y+3}{5}}$", True),
    ("grader", "\\frac{13}{4}", "$\\boxed{3.26}$", False),  # within 1e-2 relative: another answer
    ("grader", "(-\\sqrt{2},\\sqrt{2})", "$\\boxed{(-1.414, 1.414)}$", False),  # a rounding of an exact gold
    ("grader", "4+7.2i", "$\\boxed{4.0+7.1i}$", False),
    ("grader", "5(y+2)(y-2)", "$\\boxed{5(y - 2)(y + 2)}$", True),
    ("grader", "\\cot^2(t)+1", "$\\boxed{\\csc^2(t)}$", True),
    ("grader", "12x-5y+8z+30=0", "$\\boxed{-12x+5y-8z-30=0}$", True),
    ("grader", "12x-5y+8z+30=0", "$\\boxed{12x+5y+8z+30=0}$", False),
    ("grader", "41.7", "$\\boxed{\\frac{125}{3}}$", True),  # an unmarked decimal gold rounding an exact value
    (
        "grader",
        "(\\begin{pmatrix}-\\frac{5}{3}&-1\\\\2&\\frac{1}{3}\\\\\\end{pmatrix})",
        "$\\boxed{\\begin{pmatrix}-\\frac{5}{3}&-1\\\\2&\\frac{1}{3}\\end{pmatrix}}$",
        True,
    ),
    ("grader", "p = q", "$\\boxed{q = p}$", True),
    ("grader", "p = q", "$\\boxed{p = r}$", False),
    ("grader", "-8", "$\\boxed{- 8}$", True),
]
SPECIAL_PROSE: list[tuple[str, str, str, bool]] = [
    ("prose", "\\text{No, such a coloring does not exist}", "$\\boxed{\\text{No, such a coloring doesn't exist.}}$", True),
    ("prose", "\\text{No, such a coloring does not exist}", "$\\boxed{\\text{Yes, such a coloring exists.}}$", False),
    ("prose", "\\text{The first player wins}", "**Final Answer**\n\\[\n\\boxed{\\text{The first player wins}}\n\\]", True),
    ("prose", "\\text{The first player wins}", "**Final Answer**\n\\[\n\\boxed{\\text{The second player wins}}\n\\]", False),
    ("prose", "\\text{Bob wins in 4 moves}", "$\\boxed{\\text{bob wins in 4 moves}}$", True),
    ("prose", "\\text{Bob wins in 4 moves}", "$\\boxed{\\text{Bob wins in 5 moves}}$", False),
]

SPECIAL_REDTEAM: list[tuple[str, str, str, bool]] = [
    ("redteam", "7", "So $x = 7$, giving \\boxed{7}.\n\nWait, I dropped a sign. Let me redo the last step.", False),
    ("redteam", "7", "Thus the answer is $\\boxed{7}$.\n\nHmm, actually that's wrong: the answer should be $9$.", False),
    ("redteam", "9", "Thus the answer is $\\boxed{7}$.\n\nHmm, actually that's wrong: the answer should be $9$.", False),
    ("redteam", "7", "Final Answer: The final answer is $7$. I hope it is correct.\n\nActually no, it is 9.", False),
    ("redteam", "7", "It is tempting to answer $\\boxed{7}$, but that ignores the case $n = 0$.", False),
    ("redteam", "7", "The sum is $3 + 4 = 7$, so\n\n\\[\\boxed{7}\\]\n\n**Final Answer**\n", False),
    ("redteam", "7", "Hence $\\boxed{7}$.\nThe final answer is $", False),
    ("redteam", "7", "Could the answer be $\\boxed{7}$?", False),
    ("redteam", "7", "Suppose the answer is $7$. Then the remaining cases must sum to 13.", False),
    ("redteam", "7", "Thus $a$ is 12 and $b$ is 7.", False),
    ("redteam", "3", "\\boxed{x = 7 \\Rightarrow y = 3}", False),
    ("redteam", "12 \\text{ cm}^2", "The area is $\\boxed{12 \\text{ cm}}$.", False),
    ("redteam", "\\$12", "The discount is $\\boxed{12\\%}$.", False),
    ("redteam", "30^\\circ", "The angle is $\\boxed{30 \\text{ radians}}$.", False),
    ("redteam", "12", "The total is $\\boxed{12\\text{k}}$.", False),
    ("redteam", "7", "The value is $\\boxed{7\\ldots}$", False),
    ("redteam", "7", "Therefore the answer is $\\boxed{7}$.\n\nWait, let me verify: $3 + 4 = 7$. Yes, the answer is 7.", True),
    ("redteam", "7", "The answer is $\\boxed{7}$, which is the number of distinct primes below 18.", True),
    ("redteam", "7", "$\\boxed{7}$ (there are no other solutions)", True),
    ("redteam", "12 \\text{ cm}^2", "The area is $\\boxed{12 \\text{ square centimeters}}$.", True),
    ("redteam", "\\$12", "He saves $\\boxed{12 \\text{ dollars}}$.", True),
    ("redteam", "100^\\circ \\text{C}", "Water boils at $\\boxed{100^\\circ}$.", True),
    ("redteam", "7", "\\boxed{x := 7}", True),
    ("redteam", "7", "**Answer:** $a = 7$, so $b = 10$", False),
    ("redteam", "7", "Final answer: the smallest is 3 and the largest is 7", False),
    ("redteam", "7", "Final answer: at least 7", False),
    ("redteam", "7", "所以答案是 $\\boxed{7}$。\n\n等等，我算错了，答案应该是9。", False),
    ("redteam", "7", "<answer>7</answer>\nWait, actually it is 9.", False),
    ("redteam", "7", "$\\boxed{7}$\n\nThe common mistake is to answer 9, which counts the empty set.", True),
    ("redteam", "7", "Therefore, if we add the two cases, the answer is 7.", True),
    ("redteam", "3/4", "Therefore, the chance that the red ball is drawn first is 3/4.", True),
]


def rows() -> list[tuple[str, str, str, str, bool]]:
    """Every labelled row ``(id, source, gold, completion, expected)``, deterministic."""
    out: list[tuple[str, str, str, str, bool]] = []
    for n, (source, gold, work, right, wrong) in enumerate(ITEMS):
        forms = [(a, True) for a in right] + [(a, False) for a in wrong]
        for k, (ans, ok) in enumerate(forms):
            style, template = STYLES[(n * 5 + k * 3) % len(STYLES)]
            if style == "gsm8k" and any(c in ans for c in "\\{}^"):  # "#### X" lines hold plain numbers
                style, template = STYLES[1]
            out.append((f"{source}-{n}-{k}-{style}", source, gold, template.format(work=work, ans=ans), ok))
    for n, (source, gold, completion, ok) in enumerate(SPECIAL + SPECIAL_MV + SPECIAL_EQUIV + SPECIAL_PROSE + SPECIAL_REDTEAM):
        out.append((f"special-{n}", source, gold, completion, ok))
    return out
