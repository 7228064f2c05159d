"""Code verification: run a model-written Python program against tests in the sandbox.

Tests (the ``tests`` field of a task) are a list of
    * assert statements (``"assert add(1, 2) == 3"``) and unittest-style assert calls
      (``"tc.assertEqual(add(1, 2), 3)"``, ``self.assertTrue(...)``, ``assertAlmostEqual`` with
      unittest's 7 places or ``delta``, ...: each is read as the expression it checks), plus setup
      statements (imports, assignments, helper ``def``s/classes) that every assert may use;
    * stdin/stdout cases: ``"stdin '3\\n' -> expected stdout '1\\n2\\n3'"`` (Python string
      literals) or ``{"stdin": ..., "stdout": ...}`` / ``{"input": ..., "output": ...}``; when the
      expected stdout is missing it is computed by running the reference solution (``gold``);
    * one ``{"check": <source defining check(candidate)>, "entry_point": name}`` (HumanEval's test,
      with the prompt's helpers), run natively by ``_run_check``: ``check`` runs in a trusted
      process with ``candidate`` a proxy; its calls' arguments come back as plain data, the program
      answers them as probes in its own run, and the next check run replays the answers.

How an assert is judged without trusting the program (see ``ratchet.verifiers.code._harness``): the parent splits
each assert into *probes*, the maximal sub-expressions rooted at a name the program defines
(``add(1, 2)``), and a judge expression (``__p[0] == 3``). Setup never shares a process with the
program: setup statements that do not use the program's names (expected values ``want = 'olleh'``,
reference helpers ``def ref(n)``) run only in a ``prep`` run and the judge run, which contain no
model code; a probe's arguments that use setup names (``rev(want)``) are evaluated in the prep run
and reach the program as plain data (``__a[k]``), so nothing the program can find with
``inspect.stack()``, ``sys._getframe()`` or ``gc.get_objects()`` holds an expected value. Only setup
lines that use the program's names (``s = Solution()``) run beside it. Probe values come back as
plain data (one codec, ``ratchet.verifiers.code._harness.make_codec``); the parent validates every record (kind,
field count, index in range and seen once, size, nesting depth) and anything malformed is a
``sandbox_violation``. The parent compares ``probe == literal`` itself; other judge expressions are
evaluated in the judge run. So ``sys.exit(0)``/``os._exit`` before the asserts (probes missing),
always-equal objects (not plain data), patched builtins (the judge never runs in the program's
process), fake result files or forged records cannot pass.

Value policy: a probe value is compared the way plain Python compares it. ``Counter``,
``defaultdict``, ``OrderedDict``, ``deque``, ``range``, ``Fraction``, ``Decimal`` and dict views keep
their type; an iterator (generator, ``map``, ``filter``, ``zip``, ``enumerate``, itertools objects) is
materialized in the sandbox (bounded) and becomes an iterator over its items, so
``set(evens(xs)) == {2, 4}`` holds for a generator while ``evens(xs) == [2, 4]`` does not, as in
Python. Instances of other classes are not plain data: a test must compare their attributes.

Output policy for stdio cases: lines compared as whole lists after stripping trailing whitespace
of each line and trailing empty lines; no ``zip`` truncation; the comparison is textual, so
``0.50`` is not ``0.5`` (a printed number's format is part of a stdio task's answer, as in judges
without a float checker). The program and the reference solution run with the same
``PYTHONHASHSEED`` (0), so a printed ``set`` of strings has the same order in both. A program must
also exit normally.

Program extraction: the last fenced python block; a block whose closing fence is missing (cut at
EOS) runs to the end of the text.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ratchet.verifiers.code.plan import BadTests, Plan, check_function, defined_names, entry_points, plan_tests
from ratchet.verifiers.code.records import Malformed, decode, failure, fast_judge, indexed, shape
from ratchet.verifiers.code.sandbox import (
    Isolation,
    Limits,
    RunResult,
    SandboxUnavailable,
    check_isolation,
    default_isolation,
    run_job,
)
from ratchet.verifiers.verdict import Verdict

VERSION = "code-1.4.0"


def _drop_think(text: str) -> str:
    """Text without ``<think>...</think>`` spans (an unclosed ``<think>`` hides the rest); linear time."""
    out, pos = [], 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            return "".join(out) + text[pos:]
        out.append(text[pos:start])
        end = text.find("</think>", start)
        if end < 0:
            return "".join(out)
        pos = end + len("</think>")


def extract_code(completion: str) -> str:
    """The program in a completion: the last fenced ``python``/``py`` block, else the last fenced
    block, else the whole text.

    Fences are lines starting with three backticks. A block whose closing fence is missing (the
    generation was cut at EOS or ``max_new_tokens``) runs to the end of the text. Linear time.
    """
    blocks: list[tuple[str, str]] = []
    lang, body = None, []  # lang is None outside a block
    for line in _drop_think(completion).split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            if lang is None:
                lang, body = stripped[3:].strip().split(" ")[0].lower(), []
                continue
            if not stripped[3:].strip():
                blocks.append((lang, "".join(x + "\n" for x in body)))
                lang = None
                continue
        if lang is not None:
            body.append(line)
    if lang is not None:
        blocks.append((lang, "\n".join(body)))
    py = [b for lang_, b in blocks if lang_ in ("python", "py", "python3")]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    return _drop_think(completion)


def _verdict(reason: str, t0: float, **details: Any) -> Verdict:
    return Verdict.outcome("code", VERSION, reason, t0, **details)


class _Runs:
    """Every sandboxed run of one verification, under one wall-time budget (issue 22, class 3).

    Each run gets ``limits.timeout_s`` or what is left of ``limits.total_s`` (default twice
    ``timeout_s``), whichever is less; once the budget is spent no run starts and the verification's
    verdict is ``timeout``, so a task with many cases costs at most ``total_s``, not cases x timeout.
    """

    def __init__(self, limits: Limits, isolation: str) -> None:
        self.limits, self.isolation = limits, isolation
        self.total_s = limits.total_s if limits.total_s is not None else 2 * limits.timeout_s
        self.deadline = time.monotonic() + self.total_s
        self.spent = False

    def run(self, job: dict, stdin: bytes = b"") -> RunResult:
        left = self.deadline - time.monotonic()
        if left <= 0.05:
            self.spent = True
            return RunResult(timed_out=True, isolation=self.isolation)
        timeout = min(self.limits.timeout_s, left)
        res = run_job(job, dataclasses.replace(self.limits, timeout_s=timeout, cpu_s=None), stdin, isolation=self.isolation)
        if res.timed_out and timeout < self.limits.timeout_s:
            self.spent = True
        return res


def _trustedfailure(runs: _Runs, what: str, bad: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A trusted run (no model code) failed: the task's fault, unless the verification's budget ran out."""
    if runs.spent:
        return "timeout", {"timeout": True, "budget_s": runs.total_s}
    return "bad_gold", {"error": f"{what} failed in a run without the program: {bad[0]} {bad[1]}"[:300]}


def _prep_args(plan: Plan, runs: _Runs) -> tuple[list[Any], tuple[str, dict[str, Any]] | None]:
    """Evaluate the setup-defined argument expressions in a trusted run (no model code); encoded values."""
    if not plan.args:
        return [], None
    res = runs.run({"mode": "prep", "setup": plan.setup, "exprs": plan.args})
    bad = failure(res)
    if bad:
        return [], _trustedfailure(runs, "test setup", bad)
    try:
        recs = indexed(res, ("value", "error"), len(plan.args))
    except Malformed as exc:
        return [], ("bad_gold", {"error": str(exc)})
    out = []
    for i, expr in enumerate(plan.args):
        r = recs.get(i)
        if r is None or r[0] == "error":
            why = "raised " + " ".join(r[2:]) if r else "did not run"
            return [], ("bad_gold", {"error": f"test argument {expr!r} {why}; arguments must be plain data (no objects)"[:300]})
        try:
            out.append(shape(r[2])[0])  # checked here: only well-formed data goes on
        except Malformed as exc:
            return [], ("bad_gold", {"error": f"test argument {expr!r} is not plain data: {exc}"[:300]})
    return out, None


def _run_asserts(program: str, plan: Plan, runs: _Runs, names: set[str]) -> tuple[str, dict[str, Any]]:
    args, bad = _prep_args(plan, runs)
    if bad:
        return bad
    job = {
        "mode": "assert",
        "program": program,
        "setup": plan.cand_setup,
        "args": [None if i in plan.judge_only else a for i, a in enumerate(args)],
        "probes": plan.probes,
        "candidate_names": sorted(names),
    }
    res = runs.run(job)
    bad = failure(res)
    if bad:
        return bad
    try:
        recs = indexed(res, ("value", "error"), len(plan.probes))
        if len(recs) != len(plan.probes):
            return "runtime_error", {"error": "some tests did not run"}
        for k, r in sorted(recs.items()):
            if r[0] == "error":
                return "runtime_error", {"error": f"test expression {plan.probes[k]!r} raised {' '.join(r[2:])[:200]}"}
        values = [decode(recs[k][2]) for k in range(len(plan.probes))]
    except Malformed as exc:
        return "sandbox_violation", {"violation": str(exc)}
    verdicts = [fast_judge(j, values) for j in plan.judges]
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if todo:
        judge = {
            "mode": "judge",
            "setup": plan.setup,
            "exprs": [ast.unparse(plan.judges[i]) for i in todo],
            "values": [json.loads(recs[k][2]) for k in range(len(plan.probes))],  # as received: decoded only by the judge
            "args": args,  # an unrolled comprehension's loop bindings (from the prep run)
            "audit": False,
        }
        jr = runs.run(judge)
        if runs.spent:
            return "timeout", {"timeout": True, "budget_s": runs.total_s}
        try:
            got = {k: r[2] == "True" for k, r in indexed(jr, ("judged", "judged_error"), len(todo)).items() if r[0] == "judged"}
        except Malformed:
            got = {}
        for n, i in enumerate(todo):
            verdicts[i] = got.get(n, False)
    passed = sum(bool(v) for v in verdicts)
    if passed == len(verdicts):
        return "ok", {"passed": passed, "total": len(verdicts)}
    first = next(i for i, v in enumerate(verdicts) if not v)
    return "wrong", {"passed": passed, "total": len(verdicts), "error": f"failed: {plan.asserts[first]}"}


CHECK_ROUNDS = 4  # trusted check runs per verdict; a test whose later calls depend on results needs more


def _run_check(program: str, test: str, entry: str, runs: _Runs) -> tuple[str, dict[str, Any]]:
    """HumanEval's ``check(candidate)``, run in a trusted process with ``candidate`` a proxy.

    Each round runs ``check`` with the answers known so far; the calls it makes past them come
    back as plain-data arguments, which the program answers in its own sandboxed run (one probe
    per call), and the next round replays them. Expected values never reach the program's process.
    Once the program has answered, a check run that fails (a timeout, a crash) is the program's
    verdict (its answers made it fail), never ``bad_gold``.
    """
    answers: list[list[Any]] = []
    for _ in range(CHECK_ROUNDS):
        res = runs.run({"mode": "check", "test": test, "check": "check", "answers": answers})
        bad = failure(res)
        if bad and answers:
            reason = "timeout" if bad[0] == "timeout" else "runtime_error"
            return reason, {**bad[1], "calls": len(answers), "error": f"check() failed on the program's answers: {bad[0]}"}
        if bad:
            return _trustedfailure(runs, "check()", bad)
        try:
            calls = indexed(res, ("call",), 1_000_000)
            if sorted(calls) != list(range(len(answers), len(answers) + len(calls))):
                raise Malformed(f"check() calls numbered {sorted(calls)[:5]}, expected from {len(answers)}")
            args = [shape(calls[k][2])[0] for k in sorted(calls) if k >= len(answers)]
        except Malformed as exc:
            if answers:  # the arguments are built from the program's answers
                return "runtime_error", {
                    "calls": len(answers),
                    "error": f"check() passed on a value that is not plain data: {exc}"[:300],
                }
            return "bad_gold", {"error": f"check() passed a value that is not plain data: {exc}"[:300]}
        outcome = next((r[1] for r in res.records if r[0] == "checked"), "ended without a result")
        if outcome == "pass":
            return "ok", {"passed": 1, "total": 1, "calls": len(answers)}
        raised = next((a[2] for a in answers if a[1] == "error"), None)
        if outcome.startswith("fail:") and raised:
            return "runtime_error", {"passed": 0, "total": 1, "calls": len(answers), "error": f"the program raised {raised}"}
        if outcome.startswith("fail:"):
            return "wrong", {"passed": 0, "total": 1, "calls": len(answers), "error": _failed_line(test, outcome[5:])}
        if outcome == "diverged" and answers:
            return "wrong", {"passed": 0, "total": 1, "calls": len(answers), "error": "check() diverged on the program's answers"}
        if outcome == "diverged" or not args:
            return "bad_gold", {"error": f"check() {outcome}: its calls to the candidate cannot be replayed"}
        probes = [f"{entry}(*__a[{k}][0], **__a[{k}][1])" for k in range(len(args))]
        job = {"mode": "assert", "program": program, "setup": [], "args": args, "probes": probes, "candidate_names": [entry]}
        run = runs.run(job)
        bad = failure(run)
        if bad:
            return bad
        try:
            recs = indexed(run, ("value", "error"), len(probes))
            if len(recs) != len(probes):
                return "runtime_error", {"error": "some tests did not run"}
            for k in range(len(probes)):
                r = recs[k]
                value = shape(r[2])[0] if r[0] == "value" else " ".join(r[2:])[:200]  # decoded only by the check run
                answers.append([args[k], r[0], value])
        except Malformed as exc:
            return "sandbox_violation", {"violation": str(exc)}
    return "bad_gold", {"error": f"check() still calling the candidate after {CHECK_ROUNDS} rounds"}


def _failed_line(test: str, failure: str) -> str:
    """``'AssertionError@7'`` (the check run's failure and the test line it ended on) as the failing test line,
    e.g. ``'AssertionError: assert candidate(1) == 3'``; ``failure`` as given when it names no line."""
    name, _, line = failure.partition("@")
    lines = test.splitlines()
    if not line.isdigit() or not 0 < int(line) <= len(lines):
        return name
    text = lines[int(line) - 1].strip()
    m = re.fullmatch(r"__ratchet_assert\(lambda: (.*)\)", text)
    return f"{name}: {'assert ' + m.group(1) if m else text}"[:300]


def _norm_out(s: str) -> list[str]:
    lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _run_stdio(program: str, gold: str | None, cases: list[tuple[str, str | None]], runs: _Runs) -> tuple[str, dict[str, Any]]:
    passed = 0
    for i, (stdin, expected) in enumerate(cases):
        if expected is None:
            if not gold:
                return "bad_gold", {"error": f"stdio test {i} has no expected stdout and no reference solution"}
            ref = runs.run({"mode": "stdio", "program": extract_code(gold)}, stdin.encode())
            bad = failure(ref)
            if bad:
                reason, details = _trustedfailure(runs, f"reference solution on stdio test {i}", bad)
                return reason, {**details, "passed": passed, "total": len(cases)}
            expected = ref.stdout.decode("utf-8", "replace")
        res = runs.run({"mode": "stdio", "program": program}, stdin.encode())
        bad = failure(res)
        if bad:
            return bad[0], {**bad[1], "passed": passed, "total": len(cases)}
        if _norm_out(res.stdout.decode("utf-8", "replace")) != _norm_out(expected):
            return "wrong", {"passed": passed, "total": len(cases), "failed_case": i}
        passed += 1
    return "ok", {"passed": passed, "total": len(cases)}


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
    runs = _Runs(limits, mode)
    try:
        native = check_function(tests)
        if native is not None:
            reason, details = _run_check(program, native[0], native[1], runs)
            return _verdict(reason, t0, **details, isolation=mode)
        entry = entry_points(tests, names, program, extract_code(gold) if gold else None)
        plan = plan_tests(tests, set(entry.names), entry)
    except BadTests as exc:
        return _verdict("bad_gold", t0, error=str(exc), isolation=mode)
    details: dict[str, Any] = {}
    if plan.judges:
        reason, details = _run_asserts(program, plan, runs, set(entry.names))
        if reason != "ok" or not plan.stdio:
            return _verdict(reason, t0, **details, isolation=mode)
    reason, more = _run_stdio(program, gold, plan.stdio, runs)
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
