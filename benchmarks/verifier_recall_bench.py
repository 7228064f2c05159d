"""Recall and precision of Ratchet's math verifier vs Math-Verify on realistic completions, same run.

Corpus: ``benchmarks/math_recall_corpus.py`` (a few hundred labelled rows; its docstring names the
sources). Math-Verify runs in two extraction configurations: its defaults (``parse(pred)``) and the
best of a few documented alternatives (chosen by F1 on this corpus, reported by name). Prints every
disagreement between Ratchet and Math-Verify on stderr and, as its LAST line, one JSON object::

    {"rows", "right", "wrong",
     "ratchet": {"precision", "recall", "false_positives", "false_negatives", "verifications_per_s"},
     "math_verify_default": {...}, "math_verify_best": {..., "config"}, "throughput_ratio"}

``throughput_ratio`` is Ratchet's verifications/s (best pass) over Math-Verify's (default config);
``first_pass_throughput_ratio`` uses Ratchet's first pass (cold sympy caches, no reply cache). Both run warm:
Ratchet's worker pool is started (its workers parse ``math_sympy._WARMUP`` at start) and Math-Verify
parses the same expressions once before its timing.
Run: ``.venv/bin/python benchmarks/verifier_recall_bench.py`` (needs ``pip install -e ".[bench]"``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable

from math_recall_corpus import rows

from ratchet.verifiers.math import POOL_SIZE, shutdown_pool, verify_math_batch
from ratchet.verifiers.math.comparison.symbolic import _WARMUP

Row = tuple[str, str, str, str, bool]


def run_ratchet(data: list[Row], repeat: int) -> tuple[list[bool], float, float]:
    """Verdicts, best seconds per pass of ``repeat`` and the first pass's seconds (cold caches; the
    sympy pool is started outside the timing). Later passes reuse the per-process sympy reply cache."""
    verify_math_batch([(str(k), rf"\boxed{{\sqrt{{{k * k}}}}}") for k in range(2, POOL_SIZE + 2)])  # start every worker
    times, got = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = [v.correct for v in verify_math_batch([(g, c) for _, _, g, c, _ in data], timeout_s=5.0)]
        times.append(time.perf_counter() - t0)
    return got, min(times), times[0]


def _mv_configs() -> dict[str, Callable[[str], object]]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
    from math_verify.parser import NormalizationConfig

    boxed_first = [
        LatexExtractionConfig(
            boxed_match_priority=0,
            normalization_config=NormalizationConfig(
                basic_latex=True, units=True, malformed_operators=True, nits=True, boxed="all", equations=True
            ),
        ),
        ExprExtractionConfig(),
    ]
    return {
        "default": lambda text: parse(text),
        "boxed_first+equations": lambda text: parse(text, extraction_config=boxed_first),
        "latex_only": lambda text: parse(text, extraction_config=[LatexExtractionConfig()]),
        "boxed_first+first_match": lambda text: parse(text, extraction_config=boxed_first, extraction_mode="first_match"),
    }


def run_math_verify(data: list[Row], pred_parse: Callable[[str], object]) -> tuple[list[bool], float]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    got = []
    t0 = time.perf_counter()
    for _, _, g, c, _ in data:
        try:
            gold = parse(g if "boxed" in g else "$" + g + "$")
            got.append(bool(verify(gold, pred_parse(c))))
        except Exception:  # Math-Verify raises on some inputs; its callers count that as not verified
            got.append(False)
    return got, time.perf_counter() - t0


def summarize(got: list[bool], data: list[Row], seconds: float) -> dict[str, float]:
    labels = [e for *_, e in data]
    tp = sum(a and b for a, b in zip(got, labels))
    fp = sum(a and not b for a, b in zip(got, labels))
    fn = sum(b and not a for a, b in zip(got, labels))
    return {
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(tp / (tp + fn), 4) if tp + fn else 1.0,
        "false_positives": fp,
        "false_negatives": fn,
        "verifications_per_s": round(len(labels) / seconds, 1),
    }


def _f1(s: dict[str, float]) -> float:
    p, r = s["precision"], s["recall"]
    return 2 * p * r / (p + r) if p + r else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="Ratchet passes timed (best is kept)")
    args = ap.parse_args()
    data = rows()
    right = sum(e for *_, e in data)
    print(f"{len(data)} rows ({right} right, {len(data) - right} wrong)", file=sys.stderr)
    ours, t_ours, t_first = run_ratchet(data, args.repeat)
    shutdown_pool()
    r = {**summarize(ours, data, t_ours), "first_pass_verifications_per_s": round(len(data) / t_first, 1)}
    mv: dict[str, tuple[list[bool], dict[str, float]]] = {}
    configs = _mv_configs()
    run_math_verify([("warm", "", "1", f"${t}$", True) for t in _WARMUP], configs["default"])  # same warm parser as ours
    for name, fn in configs.items():
        got, secs = run_math_verify(data, fn)
        mv[name] = (got, summarize(got, data, secs))
        print(f"math-verify[{name}]: {mv[name][1]}", file=sys.stderr)
    best = max((n for n in mv if n != "default"), key=lambda n: (_f1(mv[n][1]), -mv[n][1]["false_positives"]))
    for (rid, _, g, c, e), a, b, d in zip(data, ours, mv[best][0], mv["default"][0]):
        if a != e:
            print(f"RATCHET MISS {rid}: expected={e} gold={g!r} completion={c[-160:]!r}", file=sys.stderr)
        if a != b or a != d:
            print(f"disagree {rid}: expected={e} ratchet={a} mv_best={b} mv_default={d} gold={g!r}", file=sys.stderr)
    print(
        json.dumps(
            {
                "rows": len(data),
                "right": right,
                "wrong": len(data) - right,
                "ratchet": r,
                "math_verify_default": mv["default"][1],
                "math_verify_best": {**mv[best][1], "config": best},
                "throughput_ratio": round(r["verifications_per_s"] / mv["default"][1]["verifications_per_s"], 2),
                "first_pass_throughput_ratio": round(
                    r["first_pass_verifications_per_s"] / mv["default"][1]["verifications_per_s"], 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
