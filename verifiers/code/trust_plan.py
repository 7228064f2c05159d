"""Reading a code task's tests: which names a program defines, and how each test splits into trusted
setup, candidate-side setup, plain-data arguments, probes and judge expressions (``verifiers/code/__init__.py``
has the policy; this module only parses, it runs nothing).
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_STDIO = re.compile(r"^\s*stdin\s+(.+?)\s*->\s*expected\s+stdout\s+(.+?)\s*$", re.S)
_SCOPED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr)


class BadTests(ValueError):
    """The task's tests cannot be read (a task-data problem: verdict reason ``bad_gold``)."""


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


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


_BUILTIN_NAMES = frozenset(dir(builtins))


def _test_statements(tests: Sequence[Any]) -> list[ast.stmt]:
    """The statements of the assert/setup tests (stdio cases and unparsable lines skipped: ``plan_tests`` reports those)."""
    out: list[ast.stmt] = []
    for t in tests:
        if isinstance(t, str) and not _STDIO.match(t):
            try:
                out += ast.parse(t).body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
    return out


def _imported(stmts: list[ast.stmt]) -> set[str]:
    return {(a.asname or a.name).split(".")[0] for s in stmts if isinstance(s, (ast.Import, ast.ImportFrom)) for a in s.names}


def _class_defs(program: str) -> set[str]:
    try:
        return {s.name for s in ast.parse(program).body if isinstance(s, ast.ClassDef)}
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()


@dataclass(frozen=True)
class EntryPoints:
    """What a task takes from a program (issue 22, class 1: the program's own names never decide what the tests use).

    Attributes:
        names: the task's entry points the program defines: names the tests use and never bind themselves
            (no import, assignment, ``def``, parameter, comprehension target or lambda argument of theirs) that a
            declared ``{"entry_point": name}`` test names, else that the reference solution (``gold``) defines
            (a def, class, assignment or ``from m import name``). Without either, assert tests are refused.
            Every other name the program binds (``abs``, ``expected``, a helper, ``math``) is invisible to the tests.
        classes: entry points that are classes (the gold's classes; with a declaration, the program's).
            ``Cls(...).method(x)`` runs on the program's object.
        imports: standard modules the tests use without importing them (``math.isclose``): the task's own
            binding of that name is the module, imported in the tests' trusted setup.
    """

    names: frozenset[str]
    classes: frozenset[str]
    imports: tuple[str, ...]


def _test_bound(stmts: list[ast.stmt]) -> set[str]:
    """Every name the tests bind anywhere: imports, assignments, ``def``/``class`` names and their parameters,
    comprehension and loop targets, lambda arguments, walrus targets, ``except ... as`` names."""
    out = _imported(stmts)
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, ast.arg):
                out.add(n.arg)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.add(n.name)
    return out


def declared_entry_points(tests: Sequence[Any]) -> frozenset[str] | None:
    """The names a ``{"entry_point": name}`` (or a list of names) test declares; None when no test declares one.

    Raises:
        BadTests: a declared name is not an identifier.
    """
    out: set[str] = set()
    found = False
    for t in tests:
        if isinstance(t, dict) and "entry_point" in t and "check" not in t:
            found = True
            names = t["entry_point"] if isinstance(t["entry_point"], list) else [t["entry_point"]]
            for n in names:
                if not (isinstance(n, str) and n.isidentifier()):
                    raise BadTests(f"declared entry_point {n!r} is not a name; give the function's name, e.g. 'add'")
                out.add(n)
    return frozenset(out) if found else None


def _gold_names(gold: str | None, free: set[str]) -> set[str] | None:
    """The names a reference solution defines (def, class, assignment, ``from m import name``) that the tests use;
    None when it has none of them (a stdio program, unparsable text): then it gives no guidance."""
    if not gold:
        return None
    try:
        names = defined_names(gold) | {
            a.asname or a.name for s in ast.walk(ast.parse(gold)) if isinstance(s, ast.ImportFrom) for a in s.names
        }
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return names if names & free else None


def entry_points(tests: Sequence[Any], program_names: set[str], program: str, gold: str | None) -> EntryPoints:
    """The task's entry points for one program (see :class:`EntryPoints`); parses only, runs nothing.

    They come from a declared ``{"entry_point": name}`` test, else from the reference solution; never from the
    program or from a name the tests bind themselves (a helper's parameter, a comprehension target: a program
    defining it would move the helper beside itself).

    Raises:
        BadTests: the tests hold asserts, no entry point is declared and no reference solution names one.
    """
    stmts = _test_statements(tests)
    used = set().union(*(_names(s) for s in stmts)) if stmts else set()
    free = used - _test_bound(stmts)
    declared = declared_entry_points(tests)
    known = set(declared) if declared is not None else _gold_names(gold, free)
    if known is None:
        if stmts:
            raise BadTests(
                "a code task without a reference solution must declare its entry point: add a test "
                '{"entry_point": "<function name>"} (or a list of names), or give the reference solution'
            )
        known = set()
    names = free & known & program_names
    classes = (_class_defs(gold or "") | (_class_defs(program) if declared is not None else set())) & names
    imports = tuple(sorted(n for n in free - names - _BUILTIN_NAMES if n in sys.stdlib_module_names))
    return EntryPoints(frozenset(names), frozenset(classes), imports)


def _local_names(node: ast.AST) -> set[str]:
    """Names bound inside an expression (comprehension targets, lambda arguments, walrus targets)."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.comprehension):
            out |= _names(n.target)
        elif isinstance(n, ast.Lambda):
            out |= {a.arg for a in ast.walk(n.args) if isinstance(a, ast.arg)}
        elif isinstance(n, ast.NamedExpr):
            out |= _names(n.target)
    return out


class _ArgLifter(ast.NodeTransformer):
    """Inside candidate-side code, replace sub-expressions over setup-defined names by ``__a[k]`` (plain data).

    A lifted sub-expression is evaluated in the trusted ``prep`` run; the candidate process gets its
    value only, never the setup's objects, assignments or helpers.
    """

    def __init__(self, cand: set[str], trusted: set[str], local: set[str], args: list[str], holder: str = "__a") -> None:
        self.cand, self.trusted, self.local, self.args, self.holder = cand, trusted, local, args, holder

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.expr) and not isinstance(node, (*_SCOPED, ast.Starred, ast.Slice)):
            used = _names(node)
            if used & self.trusted and not used & (self.cand | self.local):
                src = ast.unparse(node)
                if src not in self.args:
                    self.args.append(src)
                return ast.Subscript(ast.Name(self.holder, ast.Load()), ast.Constant(self.args.index(src)), ast.Load())
        return self.generic_visit(node)


def _sub(name: str, k: int) -> ast.Subscript:
    return ast.Subscript(ast.Name(name, ast.Load()), ast.Constant(k), ast.Load())


MAX_EXPANDED = 1_000_000  # loop values one unrolled comprehension may expand into test cases (issue 36, class 6)


def _range_len(it: ast.expr) -> int | None:
    """The length of ``range(<constants>)`` without listing it; None for any other iterable."""
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords):
        return None
    try:
        return len(range(*[ast.literal_eval(a) for a in it.args]))
    except (ValueError, TypeError, SyntaxError, OverflowError, RecursionError, MemoryError):
        return None


def _project(probe: str, targets: set[str], cand: set[str], per: list[str]) -> str:
    """``probe`` with each sub-expression over loop targets (and no program name) replaced by ``__b[j]``; the
    sub-expressions are appended to ``per`` (evaluated per binding in the prep run).

    Raises:
        BadTests: a loop target is left in the probe (used where its value cannot be computed apart from the program).
    """
    tree = ast.parse(probe, mode="eval")
    out = _ArgLifter(cand, targets, _local_names(tree), per, holder="__b").visit(tree)
    text = ast.unparse(out)
    if _names(out) & targets:
        raise BadTests(
            f"test expression {probe!r} uses the loop variables {sorted(_names(out) & targets)} where the program's "
            f"values are needed to compute them; write one assert per case"
        )
    return text


class _Splitter(ast.NodeTransformer):
    """Replace candidate-rooted sub-expressions by ``__p[k]`` and collect them as probes.

    A comprehension whose element uses the program's names while its loops and conditions do not
    (``all(f(x) == ref(x) for x in xs)``) is unrolled instead of run beside the program: the loop
    bindings are computed in the trusted ``prep`` run (``__a[k]``), the program's process evaluates only
    the candidate-rooted parts for each binding (one probe, a list of tuples), and the judge evaluates
    the element with those values. So expected values inside a comprehension never reach the program.
    """

    def __init__(
        self, names: set[str], trusted: set[str], plan: Plan, probes: list[str] | None = None, local: frozenset = frozenset()
    ) -> None:
        self.names, self.trusted, self.plan, self.local = names, trusted, plan, set(local)
        self.probes, self.args = (plan.probes if probes is None else probes), plan.args

    def _refs(self, node: ast.AST) -> bool:
        return bool(_names(node) & self.names)

    def _cut(self, node: ast.AST) -> ast.expr | None:
        """The part of a chain rooted at a program name that runs beside the program; None when ``node`` is no such chain.

        A function (or value) entry point: the name and its calls, ``f(x)`` in ``f(x).startswith('a')[0]``;
        the rest (``.startswith('a')``, ``[0]``) runs in the judge on the decoded, plain value, so no method
        of a program-made object answers for the test. A class entry point or an object made from one in the
        tests' setup: the constructor, then one attribute and its calls (``Solution().twice(3)``, ``s.push(1)``).
        """
        ops: list[ast.expr] = []
        while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
            ops.append(node)
            node = node.func if isinstance(node, ast.Call) else node.value
        if not (isinstance(node, ast.Name) and node.id in self.names):
            return None
        ops.reverse()
        i = 0
        if node.id in self.plan.classes or node.id in self.plan.objects:
            if node.id in self.plan.classes and i < len(ops) and isinstance(ops[i], ast.Call):
                i += 1
            if i < len(ops) and isinstance(ops[i], ast.Attribute):
                i += 1
        while i < len(ops) and isinstance(ops[i], ast.Call):
            i += 1
        return ops[i - 1] if i else node

    def _unroll(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> ast.expr | None:
        gens = node.generators
        inner_loops = [n for g in gens for n in g.ifs] + [g.iter for g in gens[1:]]
        if self.local or any(g.is_async for g in gens):
            return None  # nested inside another unrolled comprehension: its bindings depend on the outer loop
        if not self._refs(node.elt) and not any(self._refs(n) for n in inner_loops):
            gens[0].iter = self.visit(gens[0].iter)  # only the outer iterable uses the program: probe just that
            return node
        if any(self._refs(n) for n in [gens[0].iter, *inner_loops]):
            return None
        for g in gens:
            n = _range_len(g.iter)
            if n is not None and n > MAX_EXPANDED:
                raise BadTests(
                    f"test expression {ast.unparse(node)[:120]!r} loops over {n} values; at most {MAX_EXPANDED:,} test "
                    f"cases are expanded: shrink the range or split the test"
                )
        targets = sorted(set().union(*(_names(g.target) for g in gens)))
        tup = ast.Tuple([ast.Name(t, ast.Store()) for t in targets], ast.Store())
        bind = ast.ListComp(ast.Tuple([ast.Name(t, ast.Load()) for t in targets], ast.Load()), gens)
        inner: list[str] = []
        elt = _Splitter(self.names, self.trusted, self.plan, inner, frozenset(self.local | set(targets))).visit(node.elt)
        self.args.append(ast.unparse(bind))  # every binding: for the judge only (it holds the expected side too)
        k = len(self.args) - 1
        self.plan.judge_only.add(k)
        # The program gets, per binding, only the values its calls take (``c[0]``, ``t['in']``), computed in the
        # prep run: never the binding itself (``c``, a record), which holds the expected value too.
        per: list[str] = []
        probes = [_project(p, set(targets), self.names, per) for p in inner]
        self.args.append(f"[({''.join(e + ', ' for e in per)}) for {ast.unparse(tup)} in __a[{k}]]")
        self.probes.append(f"[({''.join(p + ', ' for p in probes)}) for __b in __a[{k + 1}]]")
        for n in ast.walk(elt):  # the element's probes are now fields of this binding's tuple, __q
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "__p":
                n.value.id = "__q"
        loop = ast.comprehension(
            ast.Tuple([tup, ast.Name("__q", ast.Store())], ast.Store()),
            ast.Call(ast.Name("zip", ast.Load()), [_sub("__a", k), _sub("__p", len(self.probes) - 1)], []),
            [],
            0,
        )
        return type(node)(elt, [loop])  # type: ignore[call-arg]

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and self._refs(node):
            out = self._unroll(node)
            if out is not None:
                return ast.fix_missing_locations(out)
        cut = self._cut(node) if isinstance(node, ast.expr) else None
        if cut is not None and cut is not node:
            return self.generic_visit(node)  # the chain's outer part stays in the judge; its inner part is probed below
        if isinstance(node, ast.expr) and self._refs(node) and (cut is not None or isinstance(node, _SCOPED)):
            if isinstance(node, _SCOPED) and (
                _names(node) & self.local or any(isinstance(n, (ast.Compare, ast.BoolOp)) for n in ast.walk(node))
            ):  # it would run beside the program: its comparisons (``f(x) == y``) and an outer case (``row``) too
                raise BadTests(
                    f"test expression {ast.unparse(node)!r} compares values, or reads an outer loop's case, inside a "
                    f"lambda or a comprehension that would run beside the program; write one comprehension per assert "
                    f"with the program's calls in its element only"
                )
            if isinstance(node, _SCOPED) and _names(node) & self.trusted:
                raise BadTests(
                    f"test expression {ast.unparse(node)!r} mixes the program's names with setup-defined names inside "
                    f"a lambda or a comprehension whose loops use the program; write one assert per case"
                )
            node = _ArgLifter(self.names, self.trusted, _local_names(node) | self.local, self.args).visit(node)
            src = ast.unparse(node)
            self.probes.append(f"list({src})" if isinstance(node, ast.GeneratorExp) else src)
            return _sub("__p", len(self.probes) - 1)
        return self.generic_visit(node)


# unittest.TestCase assertion helpers as the expression they check (``tc.assertEqual(a, b)`` -> ``a == b``);
# the receiver (``self``, ``tc``) is not needed. Semantics as in unittest (assertAlmostEqual: 7 places or delta).
_UNITTEST = {
    "assertEqual": "({0}) == ({1})",
    "assertEquals": "({0}) == ({1})",
    "assertListEqual": "({0}) == ({1})",
    "assertTupleEqual": "({0}) == ({1})",
    "assertDictEqual": "({0}) == ({1})",
    "assertSetEqual": "({0}) == ({1})",
    "assertSequenceEqual": "({0}) == ({1})",
    "assertMultiLineEqual": "({0}) == ({1})",
    "assertNotEqual": "({0}) != ({1})",
    "assertTrue": "bool({0})",
    "assertFalse": "not ({0})",
    "assertIs": "({0}) is ({1})",
    "assertIsNot": "({0}) is not ({1})",
    "assertIsNone": "({0}) is None",
    "assertIsNotNone": "({0}) is not None",
    "assertIn": "({0}) in ({1})",
    "assertNotIn": "({0}) not in ({1})",
    "assertGreater": "({0}) > ({1})",
    "assertGreaterEqual": "({0}) >= ({1})",
    "assertLess": "({0}) < ({1})",
    "assertLessEqual": "({0}) <= ({1})",
    "assertCountEqual": "__import__('collections').Counter(list({0})) == __import__('collections').Counter(list({1}))",
    "assertIsInstance": "isinstance({0}, {1})",
}


def _unittest_assert(s: ast.stmt) -> ast.expr | None:
    """The checked expression of a ``<obj>.assertXxx(...)`` statement; None when ``s`` is not one.

    Raises:
        BadTests: an assert helper that has no expression form here (e.g. ``assertRaises``).
    """
    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)):
        return None
    call, name = s.value, s.value.func.attr
    if not name.startswith("assert"):
        return None
    args = [ast.unparse(a) for a in call.args]
    kw = {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}
    if name in ("assertAlmostEqual", "assertNotAlmostEqual") and len(args) >= 2:
        if "delta" in kw:
            text = f"abs(({args[0]}) - ({args[1]})) <= ({kw['delta']})"
        else:
            places = args[2] if len(args) > 2 else kw.get("places", "7")
            text = f"({args[0]}) == ({args[1]}) or round(abs(({args[0]}) - ({args[1]})), {places}) == 0"
        text = text if name == "assertAlmostEqual" else f"not ({text})"
    elif name in _UNITTEST and len(args) >= _UNITTEST[name].count("{1}") + 1:
        text = _UNITTEST[name].format(*args, "")
    else:
        raise BadTests(f"test helper {name!r} is not supported; write the test as 'assert <expression>'")
    return ast.parse(text, mode="eval").body


@dataclass
class Plan:
    """Tests prepared for one program.

    Attributes:
        setup: trusted setup statements (imports, assignments, helper defs); run only in the
            ``prep``/``judge`` processes, never beside the program.
        cand_setup: setup statements that use the program's names (``s = Solution()``), run in the
            program's process with setup-defined values replaced by ``__a[k]``.
        args: trusted expressions evaluated in the prep run (in order; each may use earlier ones as
            ``__a[k]``); the program's process gets their values as plain data, except ``judge_only``
            ones (an unrolled comprehension's full loop bindings), which only the judge sees.
        probes: candidate-rooted expressions evaluated beside the program.
        judges: each assert with probes replaced by ``__p[k]``; decided by the parent or the judge run.
        asserts: each judge's assert as written in the tests (what a failure report shows).
        stdio: (stdin, expected stdout or None) cases.
        classes: entry points that are classes (``Cls(...).method(x)`` runs on the program's object).
        objects: names the candidate-side setup binds to ``Cls(...)`` of such a class (``s.method(x)`` likewise).
    """

    setup: list[str] = field(default_factory=list)
    cand_setup: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    judge_only: set[int] = field(default_factory=set)
    probes: list[str] = field(default_factory=list)
    judges: list[ast.expr] = field(default_factory=list)
    asserts: list[str] = field(default_factory=list)
    stdio: list[tuple[str, str | None]] = field(default_factory=list)
    classes: set[str] = field(default_factory=set)
    objects: set[str] = field(default_factory=set)


def _stdio_case(t: Any) -> tuple[str, str | None] | None:
    if isinstance(t, dict):
        if "stdin" in t or "input" in t:
            out = t.get("stdout", t.get("output"))
            return str(t.get("stdin", t.get("input", ""))), None if out is None else str(out)
        raise BadTests(f"test dict {t!r} has neither 'stdin' nor 'input'; use {{'stdin': ..., 'stdout': ...}}")
    if not isinstance(t, str):
        raise BadTests(f"test {t!r} is a {type(t).__name__}; use an assert line or a {{'stdin': ..., 'stdout': ...}} dict")
    m = _STDIO.match(t)
    if not m:
        return None
    try:
        stdin, stdout = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))
    except (ValueError, SyntaxError) as exc:
        raise BadTests(f"stdio test {t!r}: both sides must be Python string literals ({exc})") from None
    return str(stdin), str(stdout)


_SETUP = (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.FunctionDef, ast.ClassDef)


def plan_tests(tests: Sequence[Any], names: set[str], entry: EntryPoints | None = None) -> Plan:
    """Split tests into trusted setup, candidate-side setup, data arguments, probes and judges.

    A setup statement that uses none of the program's names is trusted (it may hold expected
    values or a reference helper) and runs only in processes without model code; one that does
    (``s = Solution()``) runs beside the program and the names it binds count as the program's.

    Raises:
        BadTests: a test is neither an assert, a unittest-style assert call, a setup statement nor a
            stdio case, or mixes program and setup names inside a comprehension.
    """
    plan, cand, trusted = Plan(), set(names), set()
    if entry is not None:
        plan.classes = set(entry.classes)
        plan.setup = [f"import {m}" for m in entry.imports]
        trusted |= set(entry.imports)
    for t in tests:
        if isinstance(t, dict) and "entry_point" in t and "check" not in t:
            continue  # a declaration (``declared_entry_points``), not a test
        case = _stdio_case(t)
        if case is not None:
            plan.stdio.append(case)
            continue
        try:
            stmts = ast.parse(t).body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise BadTests(f"test {t!r} is not valid Python: {exc}") from None
        for s in stmts:
            check = s.test if isinstance(s, ast.Assert) else _unittest_assert(s)
            if check is not None:
                plan.asserts.append(f"assert {ast.unparse(check)}"[:300])
                plan.judges.append(_Splitter(cand, trusted, plan).visit(check))  # type: ignore[arg-type]
            elif isinstance(s, _SETUP):
                bound = defined_names(ast.unparse(s)) | {(a.asname or a.name).split(".")[0] for a in getattr(s, "names", [])}
                if _names(s) & cand or (isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name in cand):
                    if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and (
                        _names(s) & trusted or any(isinstance(n, (ast.Compare, ast.BoolOp)) for n in ast.walk(s))
                    ):  # it would run beside the program with its expected values and comparisons
                        raise BadTests(
                            f"test helper {s.name!r} calls the program and compares or uses setup values; it would run "
                            f"beside the program: write its checks as asserts, or the test as check(candidate)"
                        )
                    plan.cand_setup.append(ast.unparse(_ArgLifter(cand, trusted, set(), plan.args).visit(s)))
                    if _constructs(s, plan.classes):
                        plan.objects |= bound
                    else:
                        plan.objects -= bound
                    cand |= bound
                    trusted -= bound
                else:
                    plan.setup.append(ast.unparse(s))
                    trusted |= bound
                    cand -= bound
            else:
                raise BadTests(
                    f"test statement {ast.unparse(s)!r} is not an assert, import, assignment or def; "
                    f"write tests as 'assert f(x) == y' lines"
                )
    return plan


def _constructs(s: ast.stmt, classes: set[str]) -> bool:
    """``x = Cls(...)`` (or ``x: T = Cls(...)``) for a class entry point ``Cls``: ``x`` is the program's object."""
    value = s.value if isinstance(s, (ast.Assign, ast.AnnAssign)) else None
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in classes
