"""``verify_code``: one verification from a completion to a ``Verdict`` (the policy is in ``ratchet.verifiers.code``)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ratchet.verifiers.code.asserts import run_asserts
from ratchet.verifiers.code.budget import Runs
from ratchet.verifiers.code.humaneval import check_function, run_check
from ratchet.verifiers.code.program import extract_code
from ratchet.verifiers.code.sandbox import Isolation, Limits, SandboxUnavailable, check_isolation, default_isolation
from ratchet.verifiers.code.stdio import run_stdio
from ratchet.verifiers.code.trust_plan import BadTests, defined_names, entry_points, plan_tests
from ratchet.verifiers.verdict import Verdict

VERSION = "code-1.5.0"  # 1.5: entry points declared or from the gold; loop bindings projected (issue 36)


def _verdict(reason: str, t0: float, **details: Any) -> Verdict:
    return Verdict.outcome("code", VERSION, reason, t0, **details)


def verify_code(
    gold: str | None,
    completion: str,
    tests: Sequence[Any],
    *,
    timeout_s: float = 5.0,
    limits: Limits | None = None,
    isolation: Isolation | None = None,
) -> Verdict:
    """Run the program in ``completion`` against ``tests`` in the sandbox.

    Args:
        gold: reference solution: tells the task's entry points (the names it defines that the tests use)
            and computes missing expected stdout; may be None.
        completion: model output; the last fenced python block is the program.
        tests: assert/setup lines, unittest-style assert calls and stdio cases (module docstring).
        timeout_s: wall-clock limit per sandboxed run, seconds (overrides ``limits.timeout_s``); all runs of
            the verification share ``limits.total_s`` (default ``2 * timeout_s``).
        limits: resource limits; defaults to ``Limits(timeout_s=timeout_s)``.
        isolation: ``"kernel"`` (bubblewrap) or ``"weak"``; None: ``sandbox.default_isolation()``.

    Returns:
        ``Verdict(verifier="code")``; reasons ok, wrong, no_answer, timeout, sandbox_violation,
        runtime_error, bad_gold (unreadable tests). ``details`` has passed/total and ``isolation``.
        Nothing the program does makes this raise: an unexpected error while handling its output is this
        item's ``runtime_error`` (``details.verifier_error``), never the batch's.

    Raises:
        SandboxUnavailable: ``isolation="kernel"`` where the kernel cannot give it (one line naming
            what is missing); a configuration problem, raised before any program runs.
    """
    t0 = time.perf_counter()
    mode = isolation or default_isolation()
    check_isolation(mode)
    limits = Limits(**{**(limits.__dict__ if limits else {}), "timeout_s": timeout_s})
    try:
        return _verify(gold, completion, tests, limits, mode, t0)
    except SandboxUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - one item's failure is that item's verdict (issue 22, class 2)
        err = f"{type(exc).__name__} while handling the program's output: {str(exc)[:200]}"
        return _verdict("runtime_error", t0, error=err, verifier_error=True, isolation=mode)


def _verify(gold: str | None, completion: str, tests: Sequence[Any], limits: Limits, mode: str, t0: float) -> Verdict:
    program = extract_code(completion)
    if not program.strip():
        return _verdict("no_answer", t0, isolation=mode)
    if not tests:
        return _verdict("bad_gold", t0, error="no tests given; a program cannot be verified without tests", isolation=mode)
    try:
        names = defined_names(program)
    except SyntaxError as exc:
        return _verdict("runtime_error", t0, error=f"SyntaxError: {exc}", isolation=mode)
    except (RecursionError, ValueError, MemoryError) as exc:
        return _verdict("runtime_error", t0, error=f"{type(exc).__name__} while parsing the program", isolation=mode)
    runs = Runs(limits, mode)
    try:
        native = check_function(tests)
        if native is not None:
            reason, details = run_check(program, native[0], native[1], runs)
            return _verdict(reason, t0, **details, isolation=mode)
        entry = entry_points(tests, names, program, extract_code(gold) if gold else None)
        plan = plan_tests(tests, set(entry.names), entry)
    except BadTests as exc:
        return _verdict("bad_gold", t0, error=str(exc), isolation=mode)
    details: dict[str, Any] = {}
    if plan.judges:
        reason, details = run_asserts(program, plan, runs, set(entry.names))
        if reason != "ok" or not plan.stdio:
            return _verdict(reason, t0, **details, isolation=mode)
    reason, more = run_stdio(program, gold, plan.stdio, runs)
    return _verdict(reason, t0, **{**details, **more}, isolation=mode)


def verify_code_batch(
    items: Sequence[tuple[str | None, str, Sequence[Any]]],
    *,
    timeout_s: float = 5.0,
    limits: Limits | None = None,
    max_workers: int | None = None,
    isolation: Isolation | None = None,
) -> list[Verdict]:
    """``verify_code`` over ``(gold, completion, tests)`` items, in parallel over the cores.

    Args:
        max_workers: concurrent sandboxes; defaults to ``os.cpu_count()``.
        isolation: as in ``verify_code``; checked once before any item runs.

    Raises:
        SandboxUnavailable: as in ``verify_code``.
    """
    mode = isolation or default_isolation()
    check_isolation(mode)
    workers = max(1, max_workers or os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        return list(
            pool.map(lambda it: verify_code(it[0], it[1], it[2], timeout_s=timeout_s, limits=limits, isolation=mode), items)
        )
