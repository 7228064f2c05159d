"""A second verifier for the gate's cross-check monitor (``verifier.cross_check``): HuggingFace Math-Verify
(``pip install math-verify``) judges the same completions against the same golds; its disagreement with Ratchet's
verdicts is ``gate.monitors.cross_check_disagreement``. Never part of the reward.

Math-Verify runs in killable worker processes (``verifiers._pool.WorkerPool``) with a hard per-item time limit, not its
own ``signal.alarm`` timeouts (they break outside the main thread and cannot stop C code). An item it cannot judge
(time limit, or Math-Verify raised) is None: counted apart, never turned into "wrong".
"""

from __future__ import annotations

import importlib.util

from ratchet.verifiers._pool import WorkerPool, serve_json_lines

CROSS_CHECKS: tuple[str, ...] = ("math_verify",)
ITEM_TIMEOUT_S = 10.0  # per completion; Math-Verify judged ~30 cases/s on this machine (docs: DESIGN.md)
_pools: dict[str, WorkerPool] = {}


def check_available(kind: str) -> None:
    """Raise ValueError (what, why, fix) when ``kind`` is unknown or its package is not installed."""
    if kind not in CROSS_CHECKS:
        raise ValueError(f"verifier.cross_check {kind!r} is unknown; use one of {list(CROSS_CHECKS)} or leave it unset")
    if importlib.util.find_spec("math_verify") is None:
        raise ValueError("verifier.cross_check = 'math_verify' needs the math-verify package: `pip install math-verify`")


def cross_verdicts(kind: str, pairs: list[tuple[str, str]], *, workers: int = 1) -> list[bool | None]:
    """The second verifier's correctness of each ``(gold, completion)`` pair, in order; None where it could not judge.

    Raises:
        ValueError: as ``check_available``.
    """
    check_available(kind)
    pool = _pools.setdefault(kind, WorkerPool("ratchet.verifiers.cross_check", workers))
    replies = pool.run([{"gold": g, "pred": p} for g, p in pairs], ITEM_TIMEOUT_S)
    return [None if r is None or r.get("correct") is None else bool(r["correct"]) for r in replies]


def _judge(gold: str, pred: str) -> dict:
    from math_verify import parse, verify

    try:
        return {
            "correct": bool(verify(parse(gold, parsing_timeout=None), parse(pred, parsing_timeout=None), timeout_seconds=None))
        }
    except Exception as e:  # Math-Verify raises on some inputs: "could not judge" (None), with the error kept
        return {"correct": None, "error": f"{type(e).__name__}: {e}"[:200]}


def main() -> None:
    """Worker loop: one JSON request per stdin line -> one JSON reply per stdout line."""
    import logging

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    _judge("1", "1")  # warm up its lazy imports before saying ready
    serve_json_lines(_judge)
