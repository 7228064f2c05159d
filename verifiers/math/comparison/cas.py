"""The math verifier's sympy stage: a pool of killable worker processes and a per-process reply cache.

Only pairs that involve a real expression reach it (``verify``'s cheap stage decides the rest); each
worker is SIGKILLed at ``timeout_s`` (``ratchet.verifiers._pool``), never ``signal.alarm``.
"""

from __future__ import annotations

import atexit
import os
from collections import OrderedDict

POOL_SIZE = max(1, min(4, os.cpu_count() or 1))  # sympy items are rare; more workers only cost memory
SYMPY_CACHE_SIZE = 4096  # sympy replies kept per process: G completions of a prompt often end in the same answer

_pool = None
_sympy_replies: OrderedDict[tuple[str, str], dict] = OrderedDict()


def _get_pool():  # type: ignore[no-untyped-def]
    global _pool
    if _pool is None:
        from ratchet.verifiers._pool import WorkerPool

        _pool = WorkerPool("ratchet.verifiers.math.comparison.symbolic", POOL_SIZE)
        atexit.register(_pool.close)
    return _pool


def shutdown_pool() -> None:
    """Kill the sympy worker processes (they are restarted on demand)."""
    global _pool
    if _pool is not None:
        _pool.close()
        _pool = None


def sympy_judge(pairs: list[tuple[str, str]], timeout_s: float) -> list[dict | None]:
    """Pool replies for ``(gold text, pred text)`` pairs: each distinct pair not seen before is sent
    once; replies are kept, LRU, per process (not timeouts or memory errors, which may pass later).

    Returns:
        one reply dict (``reason``, optional ``error``) per pair, or None where the worker was killed at ``timeout_s``.
    """
    todo = [k for k in dict.fromkeys(pairs) if k not in _sympy_replies]
    fresh = dict(zip(todo, _get_pool().run([{"gold": g, "pred": p} for g, p in todo], timeout_s))) if todo else {}
    out = [fresh[k] if k in fresh else _sympy_replies[k] for k in pairs]
    for key, reply in [*zip(pairs, out)]:
        if reply is not None and "MemoryError" not in str(reply.get("error")):  # a resource failure may pass later
            _sympy_replies[key] = reply
            _sympy_replies.move_to_end(key)
    while len(_sympy_replies) > SYMPY_CACHE_SIZE:
        _sympy_replies.popitem(last=False)
    return out
