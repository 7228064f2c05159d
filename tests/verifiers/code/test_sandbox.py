"""Adversarial properties of the code sandbox, one per test (short timeouts, bounded resources)."""

import os
import time
from pathlib import Path

import pytest

from ratchet.verifiers.code import extract_code, verify_code, verify_code_batch
from ratchet.verifiers.code.sandbox import Limits, run_job

TESTS = [{"entry_point": "add"}, "assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"


def prog(body: str) -> str:
    return f"Here is my solution:\n```python\n{body}\n```"


def test_correct_program_passes() -> None:
    v = verify_code(None, GOOD, TESTS, timeout_s=2)
    assert v.correct and v.details == {"passed": 2, "total": 2, "isolation": "kernel"}


def test_wrong_program_fails() -> None:
    assert verify_code(None, prog("def add(a, b):\n    return a - b"), TESTS, timeout_s=2).reason == "wrong"


def test_timeout_kills_infinite_loop() -> None:
    t0 = time.perf_counter()
    v = verify_code(None, prog("def add(a, b):\n    while True:\n        pass"), TESTS, timeout_s=1)
    assert v.reason == "timeout" and time.perf_counter() - t0 < 3


def test_fork_flood_is_blocked() -> None:
    body = "import os, time\ndef add(a, b):\n    return a + b\nfor _ in range(512):\n    if os.fork() == 0:\n        time.sleep(30)\n        os._exit(0)"
    v = verify_code(None, prog(body), TESTS, timeout_s=2)
    assert not v.correct and v.reason == "sandbox_violation"


@pytest.mark.skipif(os.geteuid() != 0, reason="per-run uid (and so RLIMIT_NPROC for root) needs root")
def test_rlimit_nproc_bounds_forks_even_without_audit_hook() -> None:
    """The OS layer alone: with the audit hook off, forks stop at RLIMIT_NPROC and all die with the run."""
    body = (
        "import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        os.setsid()\n        time.sleep(30)\n        os._exit(0)\n    n += 1\nprint(n)"
    )
    res = run_job({"mode": "stdio", "program": body, "audit": False}, Limits(timeout_s=2, nproc=6))
    started = int(res.stdout.decode().strip())
    assert started <= 6
    uid = int(next(r for r in res.records if r[0] == "start")[2])
    left = [
        p
        for p in Path("/proc").glob("[0-9]*/status")
        if f"\nUid:\t{uid}\t" in p.read_text(errors="ignore") and "\nState:\tZ" not in p.read_text(errors="ignore")
    ]
    assert not left  # setsid children escaped the group, not the uid sweep


def test_memory_bomb_fails() -> None:
    body = "def add(a, b):\n    x = bytearray(4 * 1024**3)\n    return a + b"
    v = verify_code(None, prog(body), TESTS, timeout_s=2)
    assert not v.correct and v.details.get("memory_exceeded")


def test_huge_output_is_capped() -> None:
    t0 = time.perf_counter()
    # 200 MiB in 1 MiB lines: past the stdout cap, within the sandbox's memory budget (256 MiB per process)
    body = "def add(a, b):\n    line = 'x' * (1024 * 1024)\n    for _ in range(200):\n        print(line)\n    return a + b"
    v = verify_code(None, prog(body), TESTS, timeout_s=2)
    assert v.reason == "sandbox_violation" and v.details.get("output_exceeded")
    assert time.perf_counter() - t0 < 3


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)"])
def test_early_exit_cannot_pass(exit_call: str) -> None:
    v = verify_code(None, prog(f"def add(a, b):\n    return 0\n{exit_call}"), TESTS, timeout_s=2)
    assert not v.correct


def test_always_equal_objects_cannot_pass() -> None:
    body = (
        "class _E:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
        "def add(a, b):\n    return _E()"
    )
    assert not verify_code(None, prog(body), TESTS, timeout_s=2).correct
    subclass = "class I(int):\n    def __eq__(self, o): return True\ndef add(a, b):\n    return I(7)"
    assert not verify_code(None, prog(subclass), TESTS, timeout_s=2).correct


def test_always_equal_inside_comprehension_cannot_pass() -> None:
    body = "class _E:\n    def __eq__(self, other): return True\ndef sq(x):\n    return _E()"
    v = verify_code(None, prog(body), ["assert all(sq(i) == i * i for i in range(5))"], timeout_s=2)
    assert not v.correct


def test_harness_tampering_cannot_pass() -> None:
    """Fake records on every fd, patched builtins and a fake result file do not make a wrong program pass."""
    body = (
        "import builtins, os\nbuiltins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: int\n"
        "open('result.json', 'w').write('{\"passed\": true}')\n"
        'for fd in range(3, 20):\n    try:\n        os.write(fd, b\'x\\tvalue\\t0\\t["int", "3"]\\nx\\tdone\\n\')\n'
        "    except OSError:\n        pass\ndef add(a, b):\n    return 0"
    )
    v = verify_code(None, prog(body), TESTS, timeout_s=2)
    assert not v.correct


def test_file_access_outside_workdir_is_a_violation(tmp_path: Path) -> None:
    target = tmp_path / "escape"
    for body in (
        f"open({str(target)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b",
        "open('/etc/shadow').read()\ndef add(a, b):\n    return a + b",
        "import posix\nposix.system('id > /tmp/sandbox_escape_marker')\ndef add(a, b):\n    return a + b",
    ):
        v = verify_code(None, prog(body), TESTS, timeout_s=2)
        assert v.reason == "sandbox_violation", (body, v)
    assert not target.exists()


def test_files_inside_workdir_are_allowed() -> None:
    body = "open('scratch.txt', 'w').write('3')\ndef add(a, b):\n    return int(open('scratch.txt').read()) * 0 + a + b"
    assert verify_code(None, prog(body), TESTS, timeout_s=2).correct


def test_no_network() -> None:
    body = "import socket\ns = socket.socket()\ns.connect(('1.1.1.1', 80))\ndef add(a, b):\n    return a + b"
    assert verify_code(None, prog(body), TESTS, timeout_s=2).reason == "sandbox_violation"


def test_stdout_cases_compare_every_line() -> None:
    tests = ["stdin '3\\n' -> expected stdout '1\\n2\\n3'"]
    assert not verify_code(None, prog("n = int(input())\nprint(1)"), tests, timeout_s=2).correct
    assert not verify_code(None, prog("n = int(input())\nfor i in range(n + 1): print(i + 1)"), tests, timeout_s=2).correct
    assert verify_code(None, prog("n = int(input())\nfor i in range(n): print(i + 1)"), tests, timeout_s=2).correct


def test_missing_stdout_uses_reference_solution() -> None:
    gold = "n = int(input())\nprint(n * 2)"
    assert verify_code(gold, prog("print(int(input()) + int(6))"), [{"stdin": "6\n"}], timeout_s=2).correct


def test_non_literal_judge_expressions() -> None:
    tests = [
        {"entry_point": ["root", "roots"]},
        "import math",
        "assert abs(root(2) - math.sqrt(2)) < 1e-9",
        "assert sorted(roots()) == [1, 2]",
    ]
    good = prog("import math\ndef root(x):\n    return math.sqrt(x)\ndef roots():\n    return [2, 1]")
    bad = prog("def root(x):\n    return 1.4\ndef roots():\n    return [2, 1]")
    assert verify_code(None, good, tests, timeout_s=2).correct
    assert not verify_code(None, bad, tests, timeout_s=2).correct


def test_class_based_solution() -> None:
    body = "class Solution:\n    def twice(self, x):\n        return 2 * x"
    assert verify_code(None, prog(body), [{"entry_point": "Solution"}, "assert Solution().twice(4) == 8"], timeout_s=2).correct


def test_extract_last_python_block() -> None:
    assert extract_code("```python\na=1\n```\ntext\n```python\nb=2\n```") == "b=2\n"
    assert extract_code("b = 3") == "b = 3"


def test_batch_runs_in_parallel() -> None:
    items = [(None, GOOD, TESTS)] * 4 + [(None, prog("def add(a, b):\n    return 0"), TESTS)]
    assert [v.correct for v in verify_code_batch(items, timeout_s=2)] == [True] * 4 + [False]


def test_bad_tests_are_bad_gold() -> None:
    assert verify_code(None, GOOD, ["for i in range(3): pass"], timeout_s=2).reason == "bad_gold"


def test_attribute_assignment_on_a_module_is_not_a_candidate_name() -> None:
    """``getcontext().prec = 50`` / ``math.x = ...`` at top level must not crash the harness (false negative)."""
    for body in (
        "from decimal import getcontext\ngetcontext().prec = 50\ndef add(a, b):\n    return a + b",
        "import math\nmath.tau2 = 2 * math.tau\ndef add(a, b):\n    return a + b",
        "m = __import__('math')\ndef add(a, b):\n    return a + b",
    ):
        v = verify_code(None, prog(body), TESTS, timeout_s=5.0)
        assert v.correct, (body, v.reason, v.details)


@pytest.mark.parametrize(
    "body",
    [
        "import builtins\nclass AE(Exception): pass\nbuiltins.AssertionError = AE\ndef add(a, b):\n    return 0",
        'import json\njson.dumps = lambda *a, **k: \'["int", "3"]\'\ndef add(a, b):\n    return 0',
        "import os\n_w = os.write\nos.write = lambda fd, d: _w(fd, d.replace(b'0', b'3'))\ndef add(a, b):\n    return 0",
        "class I(int):\n    def __eq__(s, o): return True\n    __hash__ = int.__hash__\ndef add(a, b):\n    return I(0)",
        "def add(a, b):\n    return type('int', (int,), {'__eq__': lambda s, o: True})(0)",
        "import atexit, os\ndef add(a, b):\n    return 0\natexit.register(lambda: os._exit(0))",
        "import threading, os\ndef add(a, b):\n    return 0\ndef t():\n    while True:\n        for fd in range(3, 10):\n"
        '            try: os.write(fd, b\'x\\tvalue\\t0\\t["int","3"]\\n\')\n            except OSError: pass\n'
        "threading.Thread(target=t, daemon=True).start()",
    ],
)
def test_patching_the_harness_cannot_pass(body: str) -> None:
    assert not verify_code(None, prog(body), TESTS, timeout_s=5.0).correct


@pytest.mark.parametrize("isolation", ["kernel", "weak"])
def test_total_disk_quota_40_files_of_16_mb(isolation: str) -> None:
    """Per-file limits alone let 40 x 16 MB through; the work dir's total is bounded in both modes."""
    body = (
        "for i in range(40):\n    with open('f%d' % i, 'wb') as f:\n        for _ in range(16):\n"
        "            f.write(b'x' * 1024 * 1024)\ndef add(a, b):\n    return a + b"
    )
    v = verify_code(None, prog(body), TESTS, timeout_s=10, isolation=isolation)
    assert not v.correct and v.reason in ("runtime_error", "sandbox_violation"), v
    if isolation == "weak":
        assert v.details.get("disk_exceeded"), v
