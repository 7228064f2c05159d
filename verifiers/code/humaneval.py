"""HumanEval's ``check(candidate)`` judged natively: ``check`` runs in a trusted process with ``candidate`` a proxy."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

from ratchet.verifiers.code._harness import MAX_CHECK_CALLS
from ratchet.verifiers.code.budget import Runs, trusted_failure
from ratchet.verifiers.code.records import Malformed, failure, indexed, shape
from ratchet.verifiers.code.trust_plan import BadTests


class _SoftAsserts(ast.NodeTransformer):
    """``assert t, m`` -> ``__ratchet_assert(lambda: t, m)`` (the check harness decides when it fails)."""

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        args: list[ast.expr] = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), node.test)]
        call = ast.Call(ast.Name("__ratchet_assert", ast.Load()), args + ([node.msg] if node.msg else []), [])
        return ast.copy_location(ast.Expr(call), node)


def check_function(tests: Sequence[Any]) -> tuple[str, str] | None:
    """A ``{"check": <test source>, "entry_point": name}`` test (HumanEval's ``check(candidate)``).

    Returns:
        ``(test source with asserts made soft, entry point)``, or None when ``tests`` is not that shape.

    Raises:
        BadTests: the shape is mixed with other tests, the source is not Python, has no
            ``check(candidate)`` function, or the entry point is not an identifier.
    """
    shaped = [t for t in tests if isinstance(t, dict) and "check" in t]
    if not shaped:
        return None
    if len(tests) != 1:
        raise BadTests("a check(candidate) test must be the only test of a task; put every case inside check")
    src, entry = shaped[0]["check"], shaped[0].get("entry_point")
    if not (isinstance(entry, str) and entry.isidentifier()):
        raise BadTests(f"check test has entry_point {entry!r}; give the function's name")
    try:
        mod = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise BadTests(f"check test is not valid Python: {exc}") from None
    if not any(isinstance(n, ast.FunctionDef) and n.name == "check" and n.args.args for n in mod.body):
        raise BadTests("check test defines no check(candidate) function; define one")
    return ast.unparse(ast.fix_missing_locations(_SoftAsserts().visit(mod))), entry


CHECK_ROUNDS = 4  # trusted check runs per verdict; a test whose later calls depend on results needs more


def run_check(program: str, test: str, entry: str, runs: Runs) -> tuple[str, dict[str, Any]]:
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
            return trusted_failure(runs, "check()", bad)
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
        if outcome == "too_many_calls":
            why = f"check() calls the candidate more than {MAX_CHECK_CALLS} times in one run"
            if answers:  # the count depends on the program's answers (``range(candidate(1))``)
                return "runtime_error", {"calls": len(answers), "error": why + " on the program's answers"}
            return "bad_gold", {"error": why + " (a loop over a huge range?); split the test or shrink the loop"}
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
