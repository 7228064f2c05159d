"""Code verification: run a model-written Python program against tests in the sandbox.

Tests (the ``tests`` field of a task) are a list of
    * assert statements (``"assert add(1, 2) == 3"``), plus setup statements (imports,
      assignments, helper ``def``s) that every assert may use;
    * stdin/stdout cases: ``"stdin '3\\n' -> expected stdout '1\\n2\\n3'"`` (Python string
      literals) or ``{"stdin": ..., "stdout": ...}`` / ``{"input": ..., "output": ...}``; when the
      expected stdout is missing it is computed by running the reference solution (``gold``).

How an assert is judged without trusting the program (see ``_code_harness``): the parent splits
each assert into *probes*, the maximal sub-expressions rooted at a name the program defines
(``add(1, 2)``), and a judge expression (``__p[0] == 3``). Only the probes go to the sandbox, which
returns canonical serializations of plain builtin values; the expected side never enters the
program's process. The parent compares ``probe == literal`` itself; other judge expressions are
evaluated in a second sandbox run that contains no model code. So ``sys.exit(0)``/``os._exit``
before the asserts (probes missing), always-equal objects (not a plain builtin), patched builtins
(the judge never runs in the program's process), fake result files or fake records (no secret)
cannot pass.

Output comparison for stdio cases: lines compared as whole lists after stripping trailing
whitespace of each line and trailing empty lines; no ``zip`` truncation. A program must also exit
normally.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ratchet.verifiers._code_harness import make_codec
from ratchet.verifiers.sandbox import Limits, RunResult, run_job
from ratchet.verifiers.verdict import Verdict

VERSION = "code-1.1.0"

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)
_STDIO = re.compile(r"^\s*stdin\s+(.+?)\s*->\s*expected\s+stdout\s+(.+?)\s*$", re.S)
_SCOPED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)

# The one value codec, shared with the sandbox side (``_code_harness.make_codec``): probe values come back
# encoded by it, judge jobs get them encoded by it.
_ENCODE, _DECODE, _ = make_codec(set())


class BadTests(ValueError):
    """The task's tests cannot be read (a task-data problem: verdict reason ``bad_gold``)."""


def extract_code(completion: str) -> str:
    """The last fenced ``python``/``py`` block; else the last fenced block; else the whole text."""
    text = re.sub(r"<think>.*?</think>", "", completion, flags=re.S)
    blocks = _FENCE.findall(text)
    py = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    return text


def _bound(target: ast.expr) -> set[str]:
    """Names an assignment target binds: ``x``, ``a, (b, *c)``; not ``math.pi`` or ``memo[k]`` (those mutate)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound(e) for e in target.elts)) if target.elts else set()
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return set()


def defined_names(program: str) -> set[str]:
    """Top-level names a program binds (functions, classes, assignments; not imports)."""
    names: set[str] = set()

    def walk(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(s.name)
            elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                for t in targets:
                    names.update(_bound(t))
            for attr in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(s, attr, None)
                if isinstance(sub, list) and not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(
                        [x for x in sub if isinstance(x, ast.stmt)]
                        + [y for h in sub if isinstance(h, ast.ExceptHandler) for y in h.body]
                    )

    walk(ast.parse(program).body)
    return names


class _Splitter(ast.NodeTransformer):
    """Replace candidate-rooted sub-expressions by ``__p[k]`` and collect them as probes."""

    def __init__(self, names: set[str], probes: list[str]) -> None:
        self.names, self.probes = names, probes

    def _refs(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.names for n in ast.walk(node))

    def _rooted(self, node: ast.AST) -> bool:
        while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        return isinstance(node, ast.Name) and node.id in self.names

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.expr) and self._refs(node) and (self._rooted(node) or isinstance(node, _SCOPED)):
            src = ast.unparse(node)
            self.probes.append(f"list({src})" if isinstance(node, ast.GeneratorExp) else src)
            return ast.Subscript(ast.Name("__p", ast.Load()), ast.Constant(len(self.probes) - 1), ast.Load())
        return self.generic_visit(node)


@dataclass
class Plan:
    """Tests prepared for one program: setup code, probes, judge expressions, stdio cases."""

    setup: list[str] = field(default_factory=list)
    probes: list[str] = field(default_factory=list)
    judges: list[ast.expr] = field(default_factory=list)
    stdio: list[tuple[str, str | None]] = field(default_factory=list)


def _stdio_case(t: Any) -> tuple[str, str | None] | None:
    if isinstance(t, dict):
        if "stdin" in t or "input" in t:
            out = t.get("stdout", t.get("output"))
            return str(t.get("stdin", t.get("input", ""))), None if out is None else str(out)
        raise BadTests(f"test dict {t!r} has neither 'stdin' nor 'input'; use {{'stdin': ..., 'stdout': ...}}")
    m = _STDIO.match(t)
    if not m:
        return None
    try:
        stdin, stdout = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))
    except (ValueError, SyntaxError) as exc:
        raise BadTests(f"stdio test {t!r}: both sides must be Python string literals ({exc})") from None
    return str(stdin), str(stdout)


def plan_tests(tests: Sequence[Any], names: set[str]) -> Plan:
    """Split tests into setup, probes and judge expressions for a program defining ``names``.

    Raises:
        BadTests: a test is neither an assert, a setup statement nor a stdio case.
    """
    plan = Plan()
    for t in tests:
        case = _stdio_case(t)
        if case is not None:
            plan.stdio.append(case)
            continue
        try:
            stmts = ast.parse(t).body
        except SyntaxError as exc:
            raise BadTests(f"test {t!r} is not valid Python: {exc}") from None
        for s in stmts:
            if isinstance(s, ast.Assert):
                plan.judges.append(_Splitter(names, plan.probes).visit(s.test))  # type: ignore[arg-type]
            elif isinstance(s, (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef, ast.ClassDef)):
                plan.setup.append(ast.unparse(s))
            else:
                raise BadTests(
                    f"test statement {ast.unparse(s)!r} is not an assert, import, assignment or def; "
                    f"write tests as 'assert f(x) == y' lines"
                )
    return plan


def _fast_judge(expr: ast.expr, values: list[Any]) -> bool | None:
    """Decide ``__p[k] == literal``, ``__p[k]`` and ``not __p[k]`` here; None when the judge run is needed."""

    def probe(n: ast.expr) -> int | None:
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "__p":
            return n.slice.value  # type: ignore[attr-defined,no-any-return]
        return None

    if probe(expr) is not None:
        return bool(values[probe(expr)])  # type: ignore[index]
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not) and probe(expr.operand) is not None:
        return not values[probe(expr.operand)]  # type: ignore[index]
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], (ast.Eq, ast.NotEq)):
        left, right = expr.left, expr.comparators[0]
        k, lit = (probe(left), right) if probe(left) is not None else (probe(right), left)
        if k is None:
            return None
        try:
            expected = ast.literal_eval(lit)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        same = bool(values[k] == expected)  # both sides are plain builtins rebuilt here: == is safe
        return same if isinstance(expr.ops[0], ast.Eq) else not same
    return None


def _failure(res: RunResult) -> tuple[str, dict[str, Any]] | None:
    """Map sandbox-level events to (reason, details), or None when the run finished normally."""
    kinds = {r[0] for r in res.records}
    if "violation" in kinds:
        return "sandbox_violation", {"violation": next(r[1] for r in res.records if r[0] == "violation")}
    if res.forged_records:
        return "sandbox_violation", {"violation": f"{res.forged_records} forged result records (harness tampering)"}
    if res.output_exceeded:
        return "sandbox_violation", {"violation": "output limit exceeded", "output_exceeded": True}
    if res.timed_out or res.returncode in (-9, -24):
        return "timeout", {"timeout": True}
    mem = any(r[0] in ("load_error", "error") and "MemoryError" in r for r in res.records)
    if mem:
        return "sandbox_violation", {"violation": "memory limit exceeded", "memory_exceeded": True}
    if "load_error" in kinds or "exit" in kinds:
        rec = next(r for r in res.records if r[0] in ("load_error", "exit"))
        return "runtime_error", {"error": " ".join(rec[1:])[:300]}
    if "done" not in kinds:
        return "runtime_error", {"error": f"program ended before the tests ran (exit {res.returncode})"}
    return None


def _verdict(reason: str, t0: float, **details: Any) -> Verdict:
    return Verdict.outcome("code", VERSION, reason, t0, **details)


def _run_asserts(program: str, plan: Plan, limits: Limits, names: set[str]) -> tuple[str, dict[str, Any]]:
    job = {"mode": "assert", "program": program, "setup": plan.setup, "probes": plan.probes, "candidate_names": sorted(names)}
    res = run_job(job, limits)
    bad = _failure(res)
    if bad:
        return bad
    values: list[Any] = [None] * len(plan.probes)
    seen: set[int] = set()
    for r in res.records:
        if r[0] in ("value", "error"):
            k = int(r[1])
            if k in seen:
                return "sandbox_violation", {"violation": f"duplicate record for probe {k} (harness tampering)"}
            seen.add(k)
            if r[0] == "error":
                return "runtime_error", {"error": f"test expression {plan.probes[k]!r} raised {' '.join(r[2:])[:200]}"}
            values[k] = _DECODE(json.loads(r[2]))
    if len(seen) != len(plan.probes):
        return "runtime_error", {"error": "some tests did not run"}
    verdicts = [_fast_judge(j, values) for j in plan.judges]
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if todo:
        judge = {
            "mode": "judge",
            "setup": plan.setup,
            "exprs": [ast.unparse(plan.judges[i]) for i in todo],
            "values": [_ENCODE(v, [1_000_000]) for v in values],
            "audit": False,
        }
        jr = run_job(judge, limits)
        got = {int(r[1]): r[2] == "True" for r in jr.records if r[0] == "judged"}
        for n, i in enumerate(todo):
            verdicts[i] = got.get(n, False)
    passed = sum(bool(v) for v in verdicts)
    return ("ok" if passed == len(verdicts) else "wrong"), {"passed": passed, "total": len(verdicts)}


def _norm_out(s: str) -> list[str]:
    lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _run_stdio(program: str, gold: str | None, cases: list[tuple[str, str | None]], limits: Limits) -> tuple[str, dict[str, Any]]:
    passed = 0
    for i, (stdin, expected) in enumerate(cases):
        if expected is None:
            if not gold:
                return "bad_gold", {"error": f"stdio test {i} has no expected stdout and no reference solution"}
            ref = run_job({"mode": "stdio", "program": extract_code(gold)}, limits, stdin.encode())
            if _failure(ref):
                return "bad_gold", {"error": f"reference solution failed on stdio test {i}: {_failure(ref)}"}
            expected = ref.stdout.decode("utf-8", "replace")
        res = run_job({"mode": "stdio", "program": program}, limits, stdin.encode())
        bad = _failure(res)
        if bad:
            return bad[0], {**bad[1], "passed": passed, "total": len(cases)}
        if _norm_out(res.stdout.decode("utf-8", "replace")) != _norm_out(expected):
            return "wrong", {"passed": passed, "total": len(cases), "failed_case": i}
        passed += 1
    return "ok", {"passed": passed, "total": len(cases)}


def verify_code(
    gold: str | None, completion: str, tests: Sequence[Any], *, timeout_s: float = 5.0, limits: Limits | None = None
) -> Verdict:
    """Run the program in ``completion`` against ``tests`` in the sandbox.

    Args:
        gold: reference solution (used only to compute missing expected stdout); may be None.
        completion: model output; the last fenced python block is the program.
        tests: assert/setup lines and stdio cases (module docstring).
        timeout_s: wall-clock limit per sandboxed run, seconds (overrides ``limits.timeout_s``).
        limits: resource limits; defaults to ``Limits(timeout_s=timeout_s)``.

    Returns:
        ``Verdict(verifier="code")``; reasons ok, wrong, no_answer, timeout, sandbox_violation,
        runtime_error, bad_gold (unreadable tests). ``details`` has passed/total.
    """
    t0 = time.perf_counter()
    limits = Limits(**{**(limits.__dict__ if limits else {}), "timeout_s": timeout_s})
    program = extract_code(completion)
    if not program.strip():
        return _verdict("no_answer", t0)
    if not tests:
        return _verdict("bad_gold", t0, error="no tests given; a program cannot be verified without tests")
    try:
        names = defined_names(program)
    except SyntaxError as exc:
        return _verdict("runtime_error", t0, error=f"SyntaxError: {exc}")
    except (RecursionError, ValueError, MemoryError) as exc:
        return _verdict("runtime_error", t0, error=f"{type(exc).__name__} while parsing the program")
    try:
        plan = plan_tests(tests, names)
    except BadTests as exc:
        return _verdict("bad_gold", t0, error=str(exc))
    details: dict[str, Any] = {}
    if plan.judges:
        reason, details = _run_asserts(program, plan, limits, names)
        if reason != "ok" or not plan.stdio:
            return _verdict(reason, t0, **details)
    reason, more = _run_stdio(program, gold, plan.stdio, limits)
    return _verdict(reason, t0, **{**details, **more})


def verify_code_batch(
    items: Sequence[tuple[str | None, str, Sequence[Any]]],
    *,
    timeout_s: float = 5.0,
    limits: Limits | None = None,
    max_workers: int | None = None,
) -> list[Verdict]:
    """``verify_code`` over ``(gold, completion, tests)`` items, in parallel over the cores.

    Args:
        max_workers: concurrent sandboxes; defaults to ``os.cpu_count()``.
    """
    workers = max(1, max_workers or os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda it: verify_code(it[0], it[1], it[2], timeout_s=timeout_s, limits=limits), items))
