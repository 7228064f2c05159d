"""Ratchet's math verifier vs math-verify, side by side on the same labelled pairs.

Pairs: the math rows of a labelled cases file (``--cases FILE``, e.g. a handed ``verifier_cases.jsonl``) plus
``--n`` (default 6000) generated gold/prediction pairs with known labels: integers (with
thousands separators), fractions in several forms, terminating decimals, percents, sets,
intervals, tuples, a few radicals, wrong values, hedges, and boxed / ``Answer:`` / answer-tag
wrappers. Prints progress lines, and as its LAST line a JSON object::

    {"ratchet": {"accuracy", "false_positives", "verifications_per_s"}, "math_verify": {...},
     "throughput_ratio": ratchet_per_s / math_verify_per_s, "pairs": N}

Run: ``.venv/bin/python benchmarks/verifier_bench.py`` (needs ``pip install math-verify``).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from fractions import Fraction
from pathlib import Path

from ratchet.verifiers.math import shutdown_pool, verify_math_batch  # noqa: E402

WRAPPERS = [r"So the result is $\boxed{%s}$.", "Reasoning...\nAnswer: %s", "<think>tried 1</think><answer>%s</answer>"]


def _frac_forms(q: Fraction) -> list[str]:
    n, d = q.numerator, q.denominator
    out = [rf"\frac{{{n}}}{{{d}}}", f"{n}/{d}", rf"\frac{{{3 * n}}}{{{3 * d}}}"]
    if n < 0:
        out.append(rf"-\frac{{{-n}}}{{{d}}}")
    t = d
    for p in (2, 5):
        while t % p == 0:
            t //= p
    if t == 1:
        out.append(str(float(q)) if abs(q) < 10**6 else f"{n}/{d}")
    return out


def generate(n: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """``n`` labelled (gold, completion, expected) pairs, deterministic for a seed."""
    rng = random.Random(seed)
    out: list[tuple[str, str, bool]] = []

    def add(gold: str, pred: str, label: bool) -> None:
        out.append((gold, rng.choice(WRAPPERS) % pred, label))

    while len(out) < n:
        kind = rng.randrange(10)
        if kind == 0:  # integers
            v = rng.randint(-(10**6), 10**6)
            add(str(v), str(v), True)
            add(str(v), str(v + rng.choice([-1, 1, 10])), False)
            if v >= 1000:
                add(str(v), f"{v:,}", True)
        elif kind in (1, 2):  # fractions
            q = Fraction(rng.randint(-500, 500), rng.randint(2, 60))
            if q.denominator == 1:
                continue
            fs = _frac_forms(q)
            add(rng.choice(fs), rng.choice(fs), True)
            wrong = q + Fraction(1, q.denominator)
            add(rng.choice(fs), rng.choice(_frac_forms(wrong)), False)
        elif kind == 3:  # decimals
            v = Fraction(rng.randint(1, 9999), 100)
            add(str(float(v)), rf"\frac{{{v.numerator}}}{{{v.denominator}}}", True)
            add(str(float(v)), str(float(v + Fraction(1, 100))), False)
        elif kind == 4:  # percents
            p = rng.randint(1, 99)
            add(rf"{p}\%", str(p / 100), True)
            add(rf"{p}\%", str(p + 1) + r"\%", False)
            add(str(p), str(p * 100), False)  # no gold*100 heuristic
        elif kind == 5:  # sets
            a, b = rng.sample(range(-50, 50), 2)
            add(rf"\{{{a},{b}\}}", rf"\{{{b},{a}\}}", True)
            add(rf"\{{{a},{b}\}}", rf"\{{{a},{b + 100}\}}", False)
        elif kind == 6:  # intervals
            a = rng.randint(-20, 20)
            b = a + rng.randint(1, 20)
            lo, hi = rng.choice("[("), rng.choice("])")
            add(f"{lo}{a},{b}{hi}", f"{lo}{a},{b}{hi}", True)
            add(f"{lo}{a},{b}{hi}", f"{'(' if lo == '[' else '['}{a},{b}{hi}", False)
        elif kind == 7:  # radicals (sympy path) kept rare
            if rng.random() < 0.3:
                k = rng.choice([2, 3, 5, 6, 7])
                add(rf"\frac{{\sqrt{{{k}}}}}{{{k}}}", rf"\frac{{1}}{{\sqrt{{{k}}}}}", True)
                add(rf"\sqrt{{{k}}}", f"{k**0.5:.2f}", False)
        elif kind == 8:  # hedges and multiple answers
            v = rng.randint(1, 100)
            out.append((str(v), rf"It is $\boxed{{{v}}}$ or $\boxed{{{v + 1}}}$.", False))
            out.append((str(v), f"The answer is one of {v}, {v + 1} or {v + 2}.", False))
        else:  # choices
            c = rng.choice("ABCDE")
            add(rf"\text{{({c})}}", c, True)
            add(c, rng.choice([x for x in "ABCDE" if x != c]), False)
    return out[:n]


def handed(path: Path) -> list[tuple[str, str, bool]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["gold"], r["prediction"], r["expected"]) for r in rows if r["kind"] == "math"]


def run_ratchet(pairs: list[tuple[str, str, bool]]) -> tuple[list[bool], float]:
    verify_math_batch([("1", r"\boxed{\sqrt{1}}")])  # start the worker pool outside the timing
    t0 = time.perf_counter()
    verdicts = verify_math_batch([(g, p) for g, p, _ in pairs], timeout_s=2.0)
    return [v.correct for v in verdicts], time.perf_counter() - t0


def run_math_verify(pairs: list[tuple[str, str, bool]]) -> tuple[list[bool], float]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    got = []
    t0 = time.perf_counter()
    for g, p, _ in pairs:
        try:
            got.append(bool(verify(parse("$" + g + "$"), parse(p))))
        except Exception:  # math-verify raises on some inputs; count it as "not verified" like its own callers do
            got.append(False)
    return got, time.perf_counter() - t0


def summarize(got: list[bool], pairs: list[tuple[str, str, bool]], seconds: float) -> dict[str, float]:
    labels = [e for _, _, e in pairs]
    return {
        "accuracy": round(sum(a == b for a, b in zip(got, labels)) / len(labels), 4),
        "false_positives": sum(a and not b for a, b in zip(got, labels)),
        "false_negatives": sum(b and not a for a, b in zip(got, labels)),
        "verifications_per_s": round(len(labels) / seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=6000, help="generated pairs (>= 5000 for the reported numbers)")
    ap.add_argument("--cases", type=Path, default=None, help="labelled cases file (its math rows are added to the pairs)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pairs = (handed(args.cases) if args.cases else []) + generate(args.n, args.seed)
    print(f"{len(pairs)} pairs ({sum(e for *_, e in pairs)} labelled correct)", file=sys.stderr)
    ours, t_ours = run_ratchet(pairs)
    print(f"ratchet: {t_ours:.2f} s", file=sys.stderr)
    theirs, t_theirs = run_math_verify(pairs)
    print(f"math-verify: {t_theirs:.2f} s", file=sys.stderr)
    for (g, p, e), a, b in zip(pairs, ours, theirs):
        if a != e:
            print(f"ratchet miss: gold={g!r} pred={p!r} expected={e}", file=sys.stderr)
    shutdown_pool()
    r, m = summarize(ours, pairs, t_ours), summarize(theirs, pairs, t_theirs)
    print(
        json.dumps(
            {
                "ratchet": r,
                "math_verify": m,
                "pairs": len(pairs),
                "throughput_ratio": round(r["verifications_per_s"] / m["verifications_per_s"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
