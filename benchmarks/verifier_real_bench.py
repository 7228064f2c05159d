"""Recall, false positives and throughput of Ratchet's math verifier vs Math-Verify on real model outputs, same run.

Corpus: ``benchmarks/real_outputs_corpus.py`` (482 completions committed by eight other projects, labelled; its
docstring names the sources, licences and the labelling). A multiple-choice row carries its options (``choices``),
passed to Ratchet as a task record would pass them; Math-Verify has no such input and reads the same rows as text. Rows of the two labels-only sources need their text
rebuilt first (``real_outputs_corpus.py --build``); without it they are skipped and counted in ``skipped``.
Figures are given per split: ``tune`` (the half the verifier's rules were tuned on) and ``heldout`` (never looked
at while tuning: the figure to quote), and over all rows. Math-Verify runs with its defaults (``parse(pred)``,
gold wrapped in ``$...$``), warm, in this process. Prints each Ratchet miss and false positive of the tune half
on stderr (the held-out half's are counted, not printed) and, as its LAST line, one JSON object::

    {"rows", "skipped", "right", "wrong",
     "ratchet": {"tune": {...}, "heldout": {...}, "all": {...}},     # precision, recall, false_positives, ...
     "math_verify": {"tune": ..., "heldout": ..., "all": ...},
     "by_source": {repo: {"rows", "right", "ratchet_tp", "ratchet_fp", "math_verify_tp", "math_verify_fp"}},
     "ratchet_verifications_per_s", "math_verify_verifications_per_s", "throughput_ratio"}

Run: ``.venv/bin/python benchmarks/verifier_real_bench.py`` (Math-Verify from ``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from real_outputs_corpus import load
from verifier_recall_bench import summarize

from ratchet.verifiers.math import POOL_SIZE, shutdown_pool, verify_math_batch


def run_ratchet(rows: list[dict], repeat: int) -> tuple[list[bool], float]:
    """Verdicts and the best seconds per pass of ``repeat`` (the sympy pool is started outside the timing)."""
    verify_math_batch([(str(k), rf"\boxed{{\sqrt{{{k * k}}}}}") for k in range(2, POOL_SIZE + 2)])
    best, got = float("inf"), []
    for _ in range(repeat):
        t0 = time.perf_counter()
        pairs = [(r["gold"], r["completion"]) for r in rows]
        got = [v.correct for v in verify_math_batch(pairs, timeout_s=5.0, choices=[r.get("choices") for r in rows])]
        best = min(best, time.perf_counter() - t0)
    return got, best


def run_math_verify(rows: list[dict]) -> tuple[list[bool], float]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    parse("$1$"), parse("warm up $\\frac{1}{2}$")  # its lazy imports happen outside the timing
    got = []
    t0 = time.perf_counter()
    for r in rows:
        try:
            got.append(bool(verify(parse("$" + r["gold"] + "$"), parse(r["completion"]))))
        except Exception:  # Math-Verify raises on some inputs; its callers count that as not verified
            got.append(False)
    return got, time.perf_counter() - t0


def by_split(got: list[bool], rows: list[dict], seconds: float) -> dict[str, dict]:
    out = {}
    for name in ("tune", "heldout", "all"):
        idx = [i for i, r in enumerate(rows) if name == "all" or r["split"] == name]
        data = [("", "", "", "", rows[i]["expected"]) for i in idx]
        s = summarize([got[i] for i in idx], data, seconds * len(idx) / len(rows))  # type: ignore[arg-type]
        out[name] = {k: v for k, v in s.items() if k != "verifications_per_s"} | {"rows": len(idx)}
    return out


def by_source(ours: list[bool], mv: list[bool], rows: list[dict]) -> dict[str, dict]:
    """Per source repository (all rows): rows, right, and each grader's true positives and false positives."""
    out: dict[str, dict] = {}
    for r, a, b in zip(rows, ours, mv):
        s = out.setdefault(
            r["source"], {"rows": 0, "right": 0, "ratchet_tp": 0, "ratchet_fp": 0, "math_verify_tp": 0, "math_verify_fp": 0}
        )
        s["rows"] += 1
        s["right"] += r["expected"]
        s["ratchet_tp"] += a and r["expected"]
        s["ratchet_fp"] += a and not r["expected"]
        s["math_verify_tp"] += b and r["expected"]
        s["math_verify_fp"] += b and not r["expected"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="Ratchet passes timed (best is kept)")
    args = ap.parse_args()
    every = load()
    rows = [r for r in every if r.get("completion") is not None]
    right = sum(r["expected"] for r in rows)
    print(
        f"{len(rows)} rows ({right} right), {len(every) - len(rows)} skipped (run real_outputs_corpus.py --build)",
        file=sys.stderr,
    )
    ours, t_ours = run_ratchet(rows, args.repeat)
    shutdown_pool()
    mv, t_mv = run_math_verify(rows)
    for r, a, b in zip(rows, ours, mv):
        if a != r["expected"] and r["split"] == "tune":
            kind = "FALSE POSITIVE" if a else "MISS"
            print(
                f"RATCHET {kind} {r['id']}: gold={r['gold']!r} math_verify={b} tail={r['completion'][-200:]!r}", file=sys.stderr
            )
    print(
        json.dumps(
            {
                "rows": len(rows),
                "skipped": len(every) - len(rows),
                "right": right,
                "wrong": len(rows) - right,
                "ratchet": by_split(ours, rows, t_ours),
                "math_verify": by_split(mv, rows, t_mv),
                "by_source": by_source(ours, mv, rows),
                "ratchet_verifications_per_s": round(len(rows) / t_ours, 1),
                "math_verify_verifications_per_s": round(len(rows) / t_mv, 1),
                "throughput_ratio": round(t_mv / t_ours, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
