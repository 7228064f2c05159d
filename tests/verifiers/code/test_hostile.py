"""A corpus of hostile programs against the code sandbox (issue 11), as root and as an ordinary user.

Every attack sets ``ok = True`` only when it succeeded, and the program's ``add`` is right only then,
so a verdict ``ok`` means an escape. Each attack is checked twice: end to end through ``verify_code``
(audit hook on: the inner layer), and through ``run_job`` with the audit hook off, where only the
kernel wall (bubblewrap namespaces, read-only runtime, tmpfs quota, rlimits) stands. Afterwards
nothing outside the work dir changed and no process the program started is alive. A control test
runs the same attacks without any sandbox and sees them succeed, so the corpus is real.
.ci/run runs this file as root and as an unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from ratchet.verifiers.code import verify_code
from ratchet.verifiers.code.sandbox import Limits, run_job

TESTS = [{"entry_point": "add"}, "assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
CANARY = "ratchet-hostile-canary-31337"
OUTCOME = "\ndef add(a, b):\n    return a + b if ok else 0\nprint('ESCAPED' if ok else 'contained')\n"

# name -> attack body; ``{...}`` fields are filled from the ``world`` fixture. Each sets ``ok``.
ATTACKS = {
    "read_0600_file_outside": "ok = False\ntry:\n    ok = 'TOPSECRET' in open({secret!r}).read()\nexcept BaseException:\n    pass",
    "read_world_readable_file_outside": "ok = False\ntry:\n    ok = 'TOPSECRET' in open({public!r}).read()\nexcept BaseException:\n    pass",
    "append_to_bashrc": (
        "ok = False\ntry:\n    with open({bashrc!r}, 'a') as f:\n        f.write('echo pwned\\n')\n    ok = True\n"
        "except BaseException:\n    pass"
    ),
    "hook_bypass_builtins": (
        "import builtins\nbuiltins.isinstance = lambda *a: True\nbuiltins.any = lambda *a: True\nbuiltins.str = lambda *a: ''\n"
        "ok = False\ntry:\n    ok = 'TOPSECRET' in open({public!r}).read()\nexcept BaseException:\n    pass"
    ),
    "hook_bypass_fsdecode": (
        "import os\nos.fsdecode = lambda p: os.getcwd() + '/x'\nok = False\ntry:\n"
        "    with open({marker!r}, 'w') as f:\n        f.write('x')\n    ok = True\nexcept BaseException:\n    pass"
    ),
    "gc_disables_hook_then_writes": (
        "import gc, types\nfor o in gc.get_objects():\n    if type(o) is types.FunctionType and o.__name__ == 'hook' and o.__closure__:\n"
        "        for c in o.__closure__:\n            v = c.cell_contents\n            if type(v) is tuple:\n"
        "                c.cell_contents = ('\\0never',)\n            elif type(v) is dict:\n                c.cell_contents = {{}}\n"
        "            elif type(v) is types.FunctionType and v.__name__ in ('inside', 'violate'):\n"
        "                c.cell_contents = lambda *a: True\n"
        "ok = False\ntry:\n    with open({marker!r}, 'w') as f:\n        f.write('x')\n    ok = True\nexcept BaseException:\n    pass"
    ),
    "posixsubprocess_fork_exec": (
        'import _posixsubprocess, os, sys\nok = False\ncode = \'open(%r, "w").write("x")\' % {marker!r}\ntry:\n'
        "    r, w = os.pipe()\n    pid = _posixsubprocess.fork_exec([sys.executable, '-c', code], [os.fsencode(sys.executable)],"
        " True, (w,), None, None, -1, -1, -1, -1, -1, -1, r, w, True, False, -1, None, None, None, -1, None, False)\n"
        "    os.waitpid(pid, 0)\n    ok = os.path.exists({marker!r})\nexcept BaseException:\n    pass"
    ),
    "network_to_host_loopback": (
        "import socket\nok = False\ntry:\n    s = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "    ok = s.recv(5) == b'hello'\nexcept BaseException:\n    pass"
    ),
    "signal_host_process": (
        "import os\nok = False\ntry:\n    os.kill({host_pid}, 0)\n"
        "    ok = b'pytest' in open('/proc/{host_pid}/cmdline', 'rb').read()\nexcept BaseException:\n    pass"
    ),
    "environment_leak": (
        "import os\nok = False\ntry:\n    ok = {canary!r} in str(dict(os.environ)) or {canary!r}.encode() in open('/proc/1/environ', 'rb').read()\n"
        "except BaseException:\n    pass"
    ),
    "setsid_double_fork_survives": (
        "import os, sys, time\nok = False\ntry:\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
        "            os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {token!r}])\n"
        "        os._exit(0)\n    time.sleep(0.2)\nexcept BaseException:\n    pass\n"
        "ok = False  # the escape is the grandchild outliving the verdict: _untouched() looks for its token"
    ),
    "fork_bomb": (
        "import os, sys\nn = 0\nfor _ in range(2000):\n    try:\n        pid = os.fork()\n    except BaseException:\n        break\n"
        "    if pid == 0:\n        try:\n            os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {token!r}])\n"
        "        finally:\n            os._exit(0)\n    n += 1\nprint('forks', n)\nok = n >= 2000"
    ),
    "disk_fill_40x16MB": (
        "written = 0\nfor i in range(40):\n    try:\n        with open('f%d' % i, 'wb') as f:\n            for _ in range(16):\n"
        "                f.write(b'x' * 1024 * 1024)\n        written += 16\n    except BaseException:\n        break\n"
        "print('MB', written)\nok = written >= 640"
    ),
}


@pytest.fixture
def world():
    """Targets outside the work dir: a 0600 'store', a world-readable file, a stand-in ~/.bashrc, a listening port."""
    d = Path(tempfile.mkdtemp(prefix="ratchet-hostile-"))
    os.chmod(d, 0o755)  # traversable: as root only the kernel wall (not permissions) keeps the per-run uid out
    secret, public, bashrc = d / "store.duckdb", d / "public.txt", d / ".bashrc"
    for f, mode in ((secret, 0o600), (public, 0o644), (bashrc, 0o666)):
        f.write_text("TOPSECRET\n" if f != bashrc else "# rc\n")
        os.chmod(f, mode)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(3)
    os.environ["RATCHET_HOSTILE_CANARY"] = CANARY
    fields = {
        "secret": str(secret),
        "public": str(public),
        "bashrc": str(bashrc),
        "marker": str(d / "marker"),
        "port": srv.getsockname()[1],
        "host_pid": os.getpid(),
        "canary": CANARY,
        "token": f"ratchet-hostile-{uuid.uuid4().hex}",
    }
    yield {"dir": d, "srv": srv, "fields": fields}
    srv.close()
    os.environ.pop("RATCHET_HOSTILE_CANARY", None)
    shutil.rmtree(d, ignore_errors=True)


def _serve(srv: socket.socket) -> None:
    """Answer any connection that reached the host's loopback (an escape would read 'hello')."""
    try:
        conn, _ = srv.accept()
        conn.sendall(b"hello")
        conn.close()
    except OSError:
        pass


def _alive(token: str) -> list[int]:
    out = []
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in p.read_bytes():
                out.append(int(p.parent.name))
        except OSError:
            continue
    return out


def _untouched(world: dict) -> None:
    d = world["dir"]
    assert sorted(p.name for p in d.iterdir()) == [".bashrc", "public.txt", "store.duckdb"], (
        "a file appeared outside the work dir"
    )
    assert (d / ".bashrc").read_text() == "# rc\n"
    assert (d / "store.duckdb").read_text() == (d / "public.txt").read_text() == "TOPSECRET\n"
    time.sleep(0.05)
    assert not _alive(world["fields"]["token"]), "a process of the program outlived its verdict"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_attack_is_contained_end_to_end(name: str, world: dict) -> None:
    body = ATTACKS[name].format(**world["fields"]) + OUTCOME
    import threading

    t = threading.Thread(target=_serve, args=(world["srv"],), daemon=True)
    t.start()
    v = verify_code(None, f"```python\n{body}\n```", TESTS, timeout_s=5)
    assert not v.correct, (name, v)
    _untouched(world)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_kernel_wall_alone_contains_attack(name: str, world: dict) -> None:
    """Audit hook off: the namespaces, the read-only view, the quota and the rlimits must hold by themselves."""
    import threading

    t = threading.Thread(target=_serve, args=(world["srv"],), daemon=True)
    t.start()
    limits = Limits(timeout_s=5, nproc=8)
    res = run_job({"mode": "stdio", "audit": False, "program": ATTACKS[name].format(**world["fields"]) + OUTCOME}, limits)
    out = res.stdout.decode()
    assert res.isolation == "kernel"
    assert "ESCAPED" not in out, (name, out, res.stderr[-500:])
    if name == "fork_bomb":
        forks = int(out.split("forks")[1].split()[0])
        assert forks <= limits.nproc, f"{forks} forks past RLIMIT_NPROC={limits.nproc}"
    if name == "disk_fill_40x16MB":
        assert int(out.split("MB")[1].split()[0]) <= limits.disk_bytes // 1024**2
    _untouched(world)


# Reading expected values out of the tests' own setup (frames, gc) and forging records.
SETUP_LEAKS = [
    (
        "inspect_stack_globals",
        "def rev(s):\n    import inspect\n    for f in inspect.stack():\n        if 'want' in f.frame.f_globals:\n"
        "            return f.frame.f_globals['want']",
        ["want = 'olleh'", "assert rev('hello') == want"],
    ),
    (
        "getframe_locals",
        "import sys\ndef rev(s):\n    f = sys._getframe()\n    while f:\n        for d in (f.f_locals, f.f_globals):\n"
        "            if 'want' in d:\n                return d['want']\n        f = f.f_back",
        ["want = 'olleh'", "assert rev('hello') == want"],
    ),
    (
        "gc_dict_with_want",
        "import gc\ndef rev(s):\n    for o in gc.get_objects():\n        if type(o) is dict and 'want' in o:\n            return o['want']",
        ["want = 'olleh'", "assert rev('hello') == want"],
    ),
    (
        "gc_finds_reference_helper",
        "import gc, types\ndef f(n):\n    for o in gc.get_objects():\n"
        "        if type(o) is types.FunctionType and o.__name__ == 'ref':\n            return o(n)\n    return -1",
        ["def ref(n):\n    return n * 7 + 1", "assert f(3) == ref(3)"],
    ),
    (
        "replays_setup_from_job",
        "import gc\ndef rev(s):\n    for o in gc.get_objects():\n        if type(o) is dict and 'setup' in o and 'probes' in o:\n"
        "            ns = {}\n            for stmt in o['setup']:\n                exec(stmt, ns)\n"
        "            if 'want' in ns:\n                return ns['want']",
        ["want = 'olleh'", "assert rev(want[::-1]) == want"],
    ),
]


@pytest.mark.parametrize("name,program,tests", SETUP_LEAKS, ids=[s[0] for s in SETUP_LEAKS])
def test_setup_values_never_reach_the_program(name: str, program: str, tests: list[str]) -> None:
    v = verify_code(None, f"```python\n{program}\n```", [{"entry_point": ["rev", "f"]}, *tests], timeout_s=5)
    assert not v.correct and v.reason in ("wrong", "runtime_error"), (name, v)


def test_setup_arguments_still_work() -> None:
    """The honest form of the same tests passes: setup values reach the program as plain data."""
    good = "```python\ndef rev(s):\n    return s[::-1]\nclass Solution:\n    def twice(self, x):\n        return 2 * x\n```"
    tests = [
        {"entry_point": ["rev", "Solution"]},
        "want = 'olleh'",
        "xs = [1, 2]",
        "assert rev(want[::-1]) == want",
        "s = Solution()",
        "assert s.twice(xs[1]) == 4",
    ]
    assert verify_code(None, good, tests, timeout_s=5).correct


FORGED = {
    "deep_nesting": '["list", [' * 5000 + "]]" * 5000,
    "list_as_dict_key": '["dict", [[["list", []], ["int", "1"]]]]',
    "unknown_tag": '["eval", "__import__(\'os\')"]',
    "bad_int": '["int", "zz"]',
    "not_json": "{{{",
}


def _forger(records: list[str]) -> str:
    """A program that finds the run's secret with gc and writes ``records`` itself, then exits."""
    lines = ", ".join(repr(r) for r in records)
    return (
        "import gc, os, sys\ndef add(a, b):\n    return a + b\n"
        "job = next(o for o in gc.get_objects() if type(o) is dict and 'secret' in o and 'mode' in o)\n"
        f"for r in [{lines}]:\n    os.write(int(sys.argv[2]), (job['secret'] + '\\t' + r + '\\n').encode())\nos._exit(0)"
    )


@pytest.mark.parametrize(
    "records",
    [
        *[[f"value\t0\t{v}", 'value\t1\t["int", "0"]', "done"] for v in FORGED.values()],
        ['value\t7\t["int", "3"]', 'value\t0\t["int", "3"]', 'value\t1\t["int", "0"]', "done"],
        ['value\t-1\t["int", "3"]', "done"],
        ['value\t0\t["int", "3"]', 'value\t0\t["int", "3"]', 'value\t1\t["int", "0"]', "done"],
        ["verdict\tok", "done"],
        ['value\t0\t["str", "' + "x" * (5 * 1024**2) + '"]', "done"],
    ],
    ids=[*FORGED, "index_out_of_range", "negative_index", "duplicate_index", "unknown_record", "huge_record"],
)
def test_malformed_records_are_violations(records: list[str]) -> None:
    v = verify_code(None, f"```python\n{_forger(records)}\n```", TESTS, timeout_s=5)
    assert not v.correct and v.reason == "sandbox_violation", v


SAFE_CONTROLS = [
    "read_0600_file_outside",
    "read_world_readable_file_outside",
    "append_to_bashrc",
    "posixsubprocess_fork_exec",
    "network_to_host_loopback",
    "signal_host_process",
    "environment_leak",
]


@pytest.mark.parametrize("name", SAFE_CONTROLS)
def test_control_attacks_work_without_a_sandbox(name: str, world: dict) -> None:
    """The corpus is real: run unsandboxed (harmless targets in a temp dir), each of these attacks succeeds."""
    import threading

    t = threading.Thread(target=_serve, args=(world["srv"],), daemon=True)
    t.start()
    body = ATTACKS[name].format(**world["fields"]) + OUTCOME
    r = subprocess.run([sys.executable, "-c", body], capture_output=True, text=True, timeout=30, cwd=world["dir"])
    assert "ESCAPED" in r.stdout, (name, r.stdout, r.stderr[-500:])


def test_control_surviving_grandchild_is_detected(world: dict) -> None:
    """The process check can fail: unsandboxed, the setsid double fork outlives its program and is found."""
    token = world["fields"]["token"]
    body = ATTACKS["setsid_double_fork_survives"].format(**world["fields"]) + OUTCOME
    subprocess.run(
        [sys.executable, "-c", body], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, cwd=world["dir"]
    )
    time.sleep(0.3)
    left = _alive(token)
    for pid in left:
        os.kill(pid, 9)
    assert left


def test_expected_values_inside_a_comprehension_never_reach_the_program() -> None:
    """``all(f(x) == y for x, y in CASES)``: the loop runs in the trusted prep run; the program sees only x."""
    thief = (
        "import sys\ndef f(x):\n    fr = sys._getframe(1)\n    while fr:\n        if 'y' in fr.f_locals:\n"
        "            return fr.f_locals['y']\n        fr = fr.f_back\n    return None"
    )
    tests = [{"entry_point": "f"}, "assert all(f(x) == y for x, y in [(1, 'one'), (2, 'two')])"]
    assert not verify_code(None, f"```python\n{thief}\n```", tests, timeout_s=5).correct
    honest = "def f(x):\n    return {1: 'one', 2: 'two'}[x]"
    assert verify_code(None, f"```python\n{honest}\n```", tests, timeout_s=5).correct
    ref = [{"entry_point": "f"}, "def ref(n):\n    return n * 7 + 1", "assert all(f(n) == ref(n) for n in range(4) if n)"]
    assert verify_code(None, "```python\ndef f(n):\n    return n * 7 + 1\n```", ref, timeout_s=5).correct
    assert not verify_code(None, "```python\ndef f(n):\n    return n * 7\n```", ref, timeout_s=5).correct
