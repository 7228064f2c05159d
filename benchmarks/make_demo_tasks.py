"""Writes the demo task sets shipped in ``loop/data`` (Apache-2.0, written for Ratchet).

    python benchmarks/make_demo_tasks.py

``code_tasks.jsonl``: short Python function tasks in HumanEval format (prompt, canonical_solution,
test with ``check(candidate)``, entry_point), easy enough that SmolLM2-135M solves some of them.
``math_tasks.jsonl``: arithmetic word-free questions with gold answers (the math half of `--tasks mixed`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "loop" / "data"

# (entry point, arguments, docstring, body, [(call args, expected)])
TASKS = [
    ("add", "a, b", "Return the sum of a and b.", "return a + b", [("2, 3", 5), ("-1, 1", 0), ("10, 20", 30)]),
    ("subtract", "a, b", "Return a minus b.", "return a - b", [("5, 3", 2), ("0, 4", -4), ("7, 7", 0)]),
    ("multiply", "a, b", "Return the product of a and b.", "return a * b", [("3, 4", 12), ("0, 9", 0), ("-2, 5", -10)]),
    ("square", "x", "Return x squared.", "return x * x", [("3", 9), ("-4", 16), ("0", 0)]),
    ("cube", "x", "Return x cubed.", "return x ** 3", [("2", 8), ("-3", -27), ("1", 1)]),
    ("double", "x", "Return twice x.", "return 2 * x", [("4", 8), ("0", 0), ("-5", -10)]),
    ("half", "x", "Return x divided by 2 as a float.", "return x / 2", [("4", 2.0), ("3", 1.5), ("0", 0.0)]),
    ("is_even", "n", "Return True if n is even, else False.", "return n % 2 == 0", [("4", True), ("7", False), ("0", True)]),
    ("is_odd", "n", "Return True if n is odd, else False.", "return n % 2 == 1", [("3", True), ("8", False), ("1", True)]),
    ("is_positive", "n", "Return True if n is greater than zero.", "return n > 0", [("5", True), ("0", False), ("-2", False)]),
    ("absolute", "x", "Return the absolute value of x.", "return abs(x)", [("-3", 3), ("4", 4), ("0", 0)]),
    ("maximum", "a, b", "Return the larger of a and b.", "return max(a, b)", [("3, 7", 7), ("9, 2", 9), ("-1, -5", -1)]),
    ("minimum", "a, b", "Return the smaller of a and b.", "return min(a, b)", [("3, 7", 3), ("9, 2", 2), ("-1, -5", -5)]),
    (
        "list_sum",
        "xs",
        "Return the sum of the numbers in the list xs.",
        "return sum(xs)",
        [("[1, 2, 3]", 6), ("[]", 0), ("[-1, 1]", 0)],
    ),
    (
        "list_max",
        "xs",
        "Return the largest number in the non-empty list xs.",
        "return max(xs)",
        [("[1, 5, 3]", 5), ("[-2, -9]", -2), ("[4]", 4)],
    ),
    (
        "list_min",
        "xs",
        "Return the smallest number in the non-empty list xs.",
        "return min(xs)",
        [("[1, 5, 3]", 1), ("[-2, -9]", -9), ("[4]", 4)],
    ),
    (
        "list_len",
        "xs",
        "Return the number of items in the list xs.",
        "return len(xs)",
        [("[1, 2, 3]", 3), ("[]", 0), ("['a']", 1)],
    ),
    (
        "first",
        "xs",
        "Return the first item of the non-empty list xs.",
        "return xs[0]",
        [("[7, 8]", 7), ("['a', 'b']", "'a'"), ("[0]", 0)],
    ),
    (
        "last",
        "xs",
        "Return the last item of the non-empty list xs.",
        "return xs[-1]",
        [("[7, 8]", 8), ("['a', 'b']", "'b'"), ("[0]", 0)],
    ),
    (
        "average",
        "xs",
        "Return the mean of the non-empty list of numbers xs.",
        "return sum(xs) / len(xs)",
        [("[1, 2, 3]", 2.0), ("[4]", 4.0), ("[1, 2]", 1.5)],
    ),
    (
        "count_positive",
        "xs",
        "Return how many numbers in xs are greater than zero.",
        "return sum(1 for x in xs if x > 0)",
        [("[1, -2, 3]", 2), ("[]", 0), ("[-1, 0]", 0)],
    ),
    (
        "count_even",
        "xs",
        "Return how many numbers in xs are even.",
        "return sum(1 for x in xs if x % 2 == 0)",
        [("[1, 2, 4]", 2), ("[]", 0), ("[3, 5]", 0)],
    ),
    (
        "evens",
        "xs",
        "Return a list of the even numbers in xs, in order.",
        "return [x for x in xs if x % 2 == 0]",
        [("[1, 2, 3, 4]", [2, 4]), ("[]", []), ("[5]", [])],
    ),
    (
        "odds",
        "xs",
        "Return a list of the odd numbers in xs, in order.",
        "return [x for x in xs if x % 2 == 1]",
        [("[1, 2, 3, 4]", [1, 3]), ("[]", []), ("[6]", [])],
    ),
    (
        "doubled",
        "xs",
        "Return a new list with every number in xs doubled.",
        "return [2 * x for x in xs]",
        [("[1, 2]", [2, 4]), ("[]", []), ("[-3]", [-6])],
    ),
    (
        "squares",
        "xs",
        "Return a new list with the square of every number in xs.",
        "return [x * x for x in xs]",
        [("[1, 2, 3]", [1, 4, 9]), ("[]", []), ("[-2]", [4])],
    ),
    (
        "reverse_list",
        "xs",
        "Return the list xs in reverse order.",
        "return xs[::-1]",
        [("[1, 2, 3]", [3, 2, 1]), ("[]", []), ("[5]", [5])],
    ),
    (
        "sort_list",
        "xs",
        "Return the numbers in xs sorted from smallest to largest.",
        "return sorted(xs)",
        [("[3, 1, 2]", [1, 2, 3]), ("[]", []), ("[2, 2, 1]", [1, 2, 2])],
    ),
    (
        "contains",
        "xs, x",
        "Return True if x is in the list xs.",
        "return x in xs",
        [("[1, 2, 3], 2", True), ("[], 1", False), ("[4], 5", False)],
    ),
    (
        "count_item",
        "xs, x",
        "Return how many times x appears in the list xs.",
        "return xs.count(x)",
        [("[1, 2, 1], 1", 2), ("[], 3", 0), ("[5, 5, 5], 5", 3)],
    ),
    (
        "unique",
        "xs",
        "Return the distinct items of xs in the order they first appear.",
        "return list(dict.fromkeys(xs))",
        [("[1, 2, 1, 3]", [1, 2, 3]), ("[]", []), ("[4, 4]", [4])],
    ),
    (
        "product",
        "xs",
        "Return the product of the numbers in xs (1 for an empty list).",
        "p = 1\n    for x in xs:\n        p *= x\n    return p",
        [("[2, 3, 4]", 24), ("[]", 1), ("[5]", 5)],
    ),
    (
        "reverse_string",
        "s",
        "Return the string s reversed.",
        "return s[::-1]",
        [("'abc'", "'cba'"), ("''", "''"), ("'x'", "'x'")],
    ),
    ("to_upper", "s", "Return s in upper case.", "return s.upper()", [("'abc'", "'ABC'"), ("'Hi'", "'HI'"), ("''", "''")]),
    ("to_lower", "s", "Return s in lower case.", "return s.lower()", [("'ABC'", "'abc'"), ("'Hi'", "'hi'"), ("''", "''")]),
    ("string_length", "s", "Return the number of characters in s.", "return len(s)", [("'abc'", 3), ("''", 0), ("'hello'", 5)]),
    (
        "first_char",
        "s",
        "Return the first character of the non-empty string s.",
        "return s[0]",
        [("'abc'", "'a'"), ("'z'", "'z'"), ("'hello'", "'h'")],
    ),
    (
        "last_char",
        "s",
        "Return the last character of the non-empty string s.",
        "return s[-1]",
        [("'abc'", "'c'"), ("'z'", "'z'"), ("'hello'", "'o'")],
    ),
    (
        "is_palindrome",
        "s",
        "Return True if s reads the same forwards and backwards.",
        "return s == s[::-1]",
        [("'aba'", True), ("'ab'", False), ("''", True)],
    ),
    (
        "count_vowels",
        "s",
        "Return how many vowels (a, e, i, o, u) are in the lower-case string s.",
        "return sum(1 for c in s if c in 'aeiou')",
        [("'hello'", 2), ("'xyz'", 0), ("'aeiou'", 5)],
    ),
    (
        "count_char",
        "s, c",
        "Return how many times the character c appears in s.",
        "return s.count(c)",
        [("'banana', 'a'", 3), ("'', 'a'", 0), ("'abc', 'z'", 0)],
    ),
    (
        "concat",
        "a, b",
        "Return the string a followed by the string b.",
        "return a + b",
        [("'ab', 'cd'", "'abcd'"), ("'', 'x'", "'x'"), ("'a', ''", "'a'")],
    ),
    (
        "repeat",
        "s, n",
        "Return the string s repeated n times.",
        "return s * n",
        [("'ab', 3", "'ababab'"), ("'x', 0", "''"), ("'', 5", "''")],
    ),
    (
        "word_count",
        "s",
        "Return the number of words in s (words are separated by spaces).",
        "return len(s.split())",
        [("'a b c'", 3), ("''", 0), ("'hello'", 1)],
    ),
    (
        "starts_with",
        "s, prefix",
        "Return True if the string s starts with prefix.",
        "return s.startswith(prefix)",
        [("'hello', 'he'", True), ("'hello', 'lo'", False), ("'', ''", True)],
    ),
    (
        "ends_with",
        "s, suffix",
        "Return True if the string s ends with suffix.",
        "return s.endswith(suffix)",
        [("'hello', 'lo'", True), ("'hello', 'he'", False), ("'a', 'a'", True)],
    ),
    (
        "remove_spaces",
        "s",
        "Return s with every space removed.",
        "return s.replace(' ', '')",
        [("'a b c'", "'abc'"), ("''", "''"), ("'  x '", "'x'")],
    ),
    (
        "capitalize_first",
        "s",
        "Return s with its first character in upper case and the rest unchanged.",
        "return s[:1].upper() + s[1:]",
        [("'hello'", "'Hello'"), ("''", "''"), ("'aBC'", "'ABC'")],
    ),
    (
        "join_words",
        "words",
        "Return the words of the list joined with single spaces.",
        "return ' '.join(words)",
        [("['a', 'b']", "'a b'"), ("[]", "''"), ("['x']", "'x'")],
    ),
    (
        "factorial",
        "n",
        "Return n factorial for n >= 0.",
        "r = 1\n    for i in range(2, n + 1):\n        r *= i\n    return r",
        [("0", 1), ("3", 6), ("5", 120)],
    ),
    (
        "fibonacci",
        "n",
        "Return the n-th Fibonacci number, with fibonacci(0) = 0 and fibonacci(1) = 1.",
        "a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
        [("0", 0), ("1", 1), ("10", 55)],
    ),
    ("sum_to", "n", "Return 1 + 2 + ... + n (0 for n = 0).", "return n * (n + 1) // 2", [("3", 6), ("0", 0), ("10", 55)]),
    (
        "is_prime",
        "n",
        "Return True if n is a prime number.",
        "if n < 2:\n        return False\n    return all(n % d for d in range(2, int(n ** 0.5) + 1))",
        [("2", True), ("9", False), ("13", True)],
    ),
    (
        "gcd",
        "a, b",
        "Return the greatest common divisor of the positive integers a and b.",
        "while b:\n        a, b = b, a % b\n    return a",
        [("12, 8", 4), ("7, 3", 1), ("10, 10", 10)],
    ),
    (
        "digit_sum",
        "n",
        "Return the sum of the decimal digits of the non-negative integer n.",
        "return sum(int(d) for d in str(n))",
        [("123", 6), ("0", 0), ("99", 18)],
    ),
    (
        "count_digits",
        "n",
        "Return how many decimal digits the non-negative integer n has.",
        "return len(str(n))",
        [("123", 3), ("0", 1), ("45", 2)],
    ),
    (
        "is_divisible",
        "a, b",
        "Return True if a is divisible by b (b is not zero).",
        "return a % b == 0",
        [("10, 5", True), ("7, 2", False), ("0, 3", True)],
    ),
    ("remainder", "a, b", "Return the remainder of a divided by b.", "return a % b", [("7, 3", 1), ("10, 5", 0), ("4, 7", 4)]),
    (
        "power",
        "base, exp",
        "Return base raised to the non-negative integer power exp.",
        "return base ** exp",
        [("2, 3", 8), ("5, 0", 1), ("3, 2", 9)],
    ),
    (
        "celsius_to_fahrenheit",
        "c",
        "Convert degrees Celsius to Fahrenheit: c * 9 / 5 + 32.",
        "return c * 9 / 5 + 32",
        [("0", 32.0), ("100", 212.0), ("-40", -40.0)],
    ),
    (
        "clamp",
        "x, lo, hi",
        "Return x limited to the range [lo, hi].",
        "return max(lo, min(x, hi))",
        [("5, 0, 10", 5), ("-3, 0, 10", 0), ("12, 0, 10", 10)],
    ),
    (
        "sign",
        "x",
        "Return 1 if x > 0, -1 if x < 0, and 0 if x == 0.",
        "return (x > 0) - (x < 0)",
        [("5", 1), ("-2", -1), ("0", 0)],
    ),
    (
        "average_of_two",
        "a, b",
        "Return the average of a and b.",
        "return (a + b) / 2",
        [("2, 4", 3.0), ("1, 2", 1.5), ("0, 0", 0.0)],
    ),
    (
        "max_of_three",
        "a, b, c",
        "Return the largest of a, b and c.",
        "return max(a, b, c)",
        [("1, 2, 3", 3), ("9, 2, 3", 9), ("1, 8, 3", 8)],
    ),
    (
        "dict_get",
        "d, key",
        "Return d[key] if key is in the dict d, else None.",
        "return d.get(key)",
        [("{'a': 1}, 'a'", 1), ("{}, 'a'", None), ("{'b': 2}, 'a'", None)],
    ),
    (
        "dict_keys_sorted",
        "d",
        "Return the keys of the dict d as a sorted list.",
        "return sorted(d)",
        [("{'b': 1, 'a': 2}", ["a", "b"]), ("{}", []), ("{'x': 0}", ["x"])],
    ),
    (
        "pair_sum",
        "pair",
        "Return the sum of the two numbers in the tuple pair.",
        "return pair[0] + pair[1]",
        [("(1, 2)", 3), ("(0, 0)", 0), ("(-1, 4)", 3)],
    ),
    (
        "swap",
        "pair",
        "Return the tuple pair with its two items swapped.",
        "return (pair[1], pair[0])",
        [("(1, 2)", (2, 1)), ("('a', 'b')", ("b", "a")), ("(0, 0)", (0, 0))],
    ),
    (
        "range_list",
        "n",
        "Return the list [0, 1, ..., n - 1].",
        "return list(range(n))",
        [("3", [0, 1, 2]), ("0", []), ("1", [0])],
    ),
    (
        "all_positive",
        "xs",
        "Return True if every number in xs is greater than zero.",
        "return all(x > 0 for x in xs)",
        [("[1, 2]", True), ("[1, -1]", False), ("[]", True)],
    ),
    (
        "any_negative",
        "xs",
        "Return True if some number in xs is below zero.",
        "return any(x < 0 for x in xs)",
        [("[1, -2]", True), ("[1, 2]", False), ("[]", False)],
    ),
    (
        "second_largest",
        "xs",
        "Return the second largest distinct number in xs (it has at least two).",
        "return sorted(set(xs))[-2]",
        [("[1, 3, 2]", 2), ("[5, 5, 4]", 4), ("[-1, -2]", -2)],
    ),
    (
        "merge_lists",
        "a, b",
        "Return the list a followed by the list b.",
        "return a + b",
        [("[1], [2]", [1, 2]), ("[], [3]", [3]), ("[], []", [])],
    ),
    (
        "index_of",
        "xs, x",
        "Return the index of the first x in xs, or -1 if x is not there.",
        "return xs.index(x) if x in xs else -1",
        [("[4, 5, 6], 5", 1), ("[], 1", -1), ("[1, 1], 1", 0)],
    ),
]


def _lit(v) -> str:
    return v if isinstance(v, str) else repr(v)


def code_records() -> list[dict]:
    out = []
    for i, (name, args, doc, body, cases) in enumerate(TASKS):
        prompt = f'def {name}({args}):\n    """{doc}\n    >>> {name}({cases[0][0]})\n    {_lit(cases[0][1])}\n    """\n'
        test = "def check(candidate):\n" + "".join(f"    assert candidate({a}) == {_lit(e)}\n" for a, e in cases)
        out.append(
            dict(task_id=f"RatchetCode/{i}", prompt=prompt, canonical_solution=f"    {body}\n", test=test, entry_point=name)
        )
    return out


def math_records(n: int = 300, seed: int = 0) -> list[dict]:
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < n:
        kind = rng.choice(["sum", "product", "difference"])
        a, b = rng.randint(2, 30), rng.randint(2, 12)
        q, ans = {
            "sum": (f"What is {a} + {b}?", a + b),
            "product": (f"What is {a} * {b}?", a * b),
            "difference": (f"What is {a + b} - {b}?", a),
        }[kind]
        if q not in seen:
            seen.add(q)
            out.append({"question": q, "answer": str(ans), "task": kind})
    return out


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, recs in (("code_tasks.jsonl", code_records()), ("math_tasks.jsonl", math_records())):
        (OUT / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
        print(f"wrote {len(recs)} tasks to {OUT / name}")
