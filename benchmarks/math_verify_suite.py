"""Development check: Ratchet's math verifier on the labelled pairs of Math-Verify's own test suite.

Reads a local checkout of https://github.com/huggingface/Math-Verify (its ``tests/`` folder; nothing is
copied into this repository), collects every ``(gold, pred, expected)`` row of its
``pytest.mark.parametrize`` tables (rows of tables parametrized by ``strict`` or ``allow_set_relation_comp``
are left out: they give one pair two labels, one per option), wraps a bare answer (one math span, no prose) in a
boxed final line as a model would write it, and prints every disagreement on stderr and, as its last
line, ``{"pairs", "right", "wrong", "true_positives", "false_positives", "false_negatives", "recall"}``.

Run: ``.venv/bin/python benchmarks/math_verify_suite.py PATH/TO/Math-Verify/tests``
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

from ratchet.verifiers.math import shutdown_pool, verify_math_batch

Pair = tuple[str, str, str, bool]  # (test name, gold, prediction, expected)
_PROSE = re.compile(r"\b[A-Za-z]{2,}\b[ ,:]+[A-Za-z]{2,}\b")


def pairs(test_dir: Path) -> list[Pair]:
    """Every labelled pair of the parametrized tests under ``test_dir`` (literal rows only)."""
    out: list[Pair] = []
    for path in sorted(test_dir.glob("test_*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize" and len(dec.args) > 1):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                if "gold" not in names or "pred" not in names:
                    continue
                try:
                    rows = ast.literal_eval(dec.args[1])
                except ValueError:  # rows built by expressions, not literals
                    continue
                for row in rows:
                    d = dict(zip(names, row))
                    if "allow_set_relation_comp" in d or "strict" in d:  # one pair, two labels: tests of an option
                        continue
                    out.append((f"{path.stem}:{fn.name}", d["gold"], d["pred"], bool(d.get("expected", d.get("result")))))
    return out


def as_completion(pred: str) -> str:
    """A bare answer (``$x = 3$``) as the boxed final line a model writes; prose stays as written."""
    if re.search(r"\\boxed|\\fbox|\n|[Aa]nswer", pred):
        return pred
    s = pred.strip()
    if len(s) > 200 or _PROSE.search(re.sub(r"\\[A-Za-z]+(\{[^{}]*\})?", " ", s)):
        return pred
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(a) and s.endswith(b) and len(s) >= len(a) + len(b):
            s = s[len(a) : len(s) - len(b)].strip()
            break
    return "The final answer is $\\boxed{" + s + "}$."


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", type=Path, help="the tests/ folder of a Math-Verify checkout")
    args = ap.parse_args()
    if not args.tests.is_dir():
        sys.exit(f"{args.tests} is not a folder; pass the tests/ folder of a Math-Verify checkout")
    data = pairs(args.tests)
    verdicts = verify_math_batch([(g, as_completion(p)) for _, g, p, _ in data], timeout_s=5.0)
    shutdown_pool()
    tp = fp = fn = 0
    for (name, g, p, e), v in zip(data, verdicts):
        tp, fp, fn = tp + (v.correct and e), fp + (v.correct and not e), fn + (e and not v.correct)
        if v.correct != e:
            print(f"{'FALSE POSITIVE' if v.correct else 'MISS'} {name} {v.reason}: gold={g!r} pred={p[-120:]!r}", file=sys.stderr)
    right = sum(e for *_, e in data)
    summary = {"pairs": len(data), "right": right, "wrong": len(data) - right}
    summary |= {"true_positives": tp, "false_positives": fp, "false_negatives": fn, "recall": round(tp / max(right, 1), 4)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
