"""Code verification: run a model-written Python program against tests in the sandbox.

Tests (the ``tests`` field of a task) are a list of
    * assert statements (``"assert add(1, 2) == 3"``) and unittest-style assert calls
      (``"tc.assertEqual(add(1, 2), 3)"``, ``self.assertTrue(...)``, ``assertAlmostEqual`` with
      unittest's 7 places or ``delta``, ...: each is read as the expression it checks), plus setup
      statements (imports, assignments, helper ``def``s/classes) that every assert may use;
    * stdin/stdout cases: ``"stdin '3\\n' -> expected stdout '1\\n2\\n3'"`` (Python string
      literals) or ``{"stdin": ..., "stdout": ...}`` / ``{"input": ..., "output": ...}``; when the
      expected stdout is missing it is computed by running the reference solution (``gold``);
    * ``{"entry_point": name}`` (or a list of names): the task's entry points, required for assert tests
      when there is no reference solution (``gold``), which otherwise names them;
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
and reach the program as plain data (``__a[k]``), and so are the projections of an unrolled comprehension's
cases (``c[0]`` of ``all(f(c[0]) == c[1] for c in CASES)``, never ``c``), so nothing the program can find with
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

from ratchet.verifiers.code.program import extract_code
from ratchet.verifiers.code.sandbox import Isolation, Limits, RunResult, SandboxUnavailable
from ratchet.verifiers.code.verify import VERSION, verify_code, verify_code_batch

__all__ = [
    "VERSION",
    "Isolation",
    "Limits",
    "RunResult",
    "SandboxUnavailable",
    "extract_code",
    "verify_code",
    "verify_code_batch",
]
