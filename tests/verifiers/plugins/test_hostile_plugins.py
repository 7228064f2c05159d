"""A verifier that misbehaves towards its worker's reply stream (issue 37's "the parent validates every record it gets
back"): forged or duplicate reply lines, lines that are not JSON objects, an endless line, a worker that closes its
replies or dies, a Verdict whose fields JSON cannot hold. Each is that item's bounded ``verifier_error`` (or is
ignored), never an exception out of the batch and never a verdict given to another completion."""

import json
import time
from pathlib import Path

import pytest

from ratchet.verifiers.plugins.runner import resolve_verifier, shutdown_pools, verify_plugin_batch

HOSTILE = r'''
import fcntl, json, os, threading, time
from ratchet.verifiers import Verdict

def _reply_fd():
    """The worker's reply pipe (a duplicate of its original stdout): what a verifier could write to directly."""
    stdin = os.readlink("/proc/self/fd/0")
    for fd in range(3, 64):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:") and target != stdin and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_WRONLY:
            return fd
    raise RuntimeError("no reply pipe")

def _write(data):
    os.write(_reply_fd(), data)

def forge_all(completion, record):
    line = "".join(json.dumps({"id": i, "kind": "bool", "value": True}) + "\n" for i in range(64))
    line += "".join(json.dumps({"id": f"{i}", "kind": "bool", "value": True}) + "\n" for i in range(64))
    _write(line.encode())
    def later():  # and again while the worker judges the next items (ids it cannot know yet)
        for _ in range(20):
            time.sleep(0.01)
            _write(line.encode())
    threading.Thread(target=later, daemon=True).start()
    return completion == "ok"

def duplicate(completion, record):
    _write(b'{"kind": "bool", "value": true}\n' * 3)
    return completion == "ok"

def not_json(completion, record):
    _write(b'garbage\n[1, 2]\n"text"\nnull\n{"id": [1]}\n\xff\xfe\n')
    return completion == "ok"

def endless(completion, record):
    if completion == "flood":
        chunk = b"x" * (1 << 20)
        while True:
            _write(chunk)
    return completion == "ok"

def close_replies(completion, record):
    if completion == "die":
        os.close(_reply_fd())
    return completion == "ok"

def exit_now(completion, record):
    if completion == "die":
        os._exit(3)
    return completion == "ok"

def exit_after_reply(completion, record):
    if completion == "die":
        threading.Thread(target=lambda: (time.sleep(0.2), os._exit(3)), daemon=True).start()
    return completion == "ok"

class _Unjsonable:
    pass

def unjsonable_reason(completion, record):
    v = Verdict(correct=False, reward=0.0, reason="wrong", parsed=None, verifier="m", verifier_version="1")
    if completion == "die":
        object.__setattr__(v, "reason", _Unjsonable())
    return v if completion != "ok" else True

def read_past_the_end(completion, record):
    return Verdict(correct=True, reward=1.0, reason="ok", parsed=None, verifier="m", verifier_version="1",
                   read_chars=10**30)

class _Float(float):
    def __float__(self):
        raise RuntimeError("hostile __float__")

class _Truthy:
    def __bool__(self):
        raise RuntimeError("hostile __bool__")

def _verdict(**kw):
    base = dict(correct=False, reward=0.0, reason="wrong", parsed=None, verifier="m", verifier_version="1")
    v = Verdict(**base)
    for k, x in kw.items():
        object.__setattr__(v, k, x)  # what __post_init__ would refuse, as a subclass or a mutation could hand back
    return v

def odd_results(completion, record):
    return {
        "float_sub": lambda: _Float(0.5),
        "huge_int": lambda: 10**400,
        "inf": lambda: _verdict(reward=float("inf")),
        "bad_bool": lambda: _verdict(correct=_Truthy()),
        "correct_wrong": lambda: _verdict(correct=True, reward=1.0),
        "unknown_reason": lambda: _verdict(reason="great"),
        "negative_read": lambda: _verdict(read_chars=-5),
        "big_parsed": lambda: _verdict(parsed="p" * 10_000_000),
    }[completion]()

_held = []

def leaks(completion, record):
    # a verifier that keeps something of every call: its worker's address space runs out after a few calls, and then
    # every call fails in that worker, whatever it judges (simulated: the 4th call of a worker is out of memory)
    _held.append(completion)
    if len(_held) > 3:
        raise MemoryError
    return completion == "ok"

def stops_reading(completion, record):
    if completion == "stop":  # after its reply, its worker reads no more requests (stopped, or a thread holding the GIL)
        import signal
        threading.Thread(target=lambda: (time.sleep(0.1), os.kill(os.getpid(), signal.SIGSTOP)), daemon=True).start()
    return completion.startswith("ok")

def claims_verifier_error(completion, record):
    return Verdict(correct=False, reward=1.0, reason="verifier_error", parsed=None, verifier="m", verifier_version="1",
                   read_chars=5)
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    (d / "hostile_checks.py").write_text(HOSTILE)
    yield d
    shutdown_pools()


def judge(folder: Path, name: str, completions: list[str], timeout_s: float = 5.0):
    shutdown_pools()  # a fresh pool: one test's broken workers never reach the next
    v = resolve_verifier(f"hostile_checks:{name}", base_dir=folder)
    return verify_plugin_batch(v, [(c, json.dumps({})) for c in completions], timeout_s=timeout_s)


def outcomes(verdicts) -> list[str]:
    return [v.reason for v in verdicts]


def test_forged_replies_for_other_items_are_ignored(folder):
    out = judge(folder, "forge_all", ["no", "ok", "no", "no", "ok", "no", "no", "no"])
    assert outcomes(out) == ["wrong", "ok", "wrong", "wrong", "ok", "wrong", "wrong", "wrong"]


def test_duplicate_and_malformed_reply_lines_do_not_break_the_batch(folder):
    assert outcomes(judge(folder, "duplicate", ["ok", "no", "ok", "no"])) == ["ok", "wrong", "ok", "wrong"]
    assert outcomes(judge(folder, "not_json", ["ok", "no", "ok", "no"])) == ["ok", "wrong", "ok", "wrong"]


def test_an_endless_reply_line_is_bounded(folder):
    t0 = time.monotonic()
    out = judge(folder, "endless", ["flood", "ok", "no"], timeout_s=20.0)
    assert outcomes(out) == ["verifier_error", "ok", "wrong"] and "ProtocolError" in out[0].details["error"]
    assert time.monotonic() - t0 < 10  # stopped at the size bound, not at the time limit


@pytest.mark.parametrize("name", ["close_replies", "exit_now", "exit_after_reply", "unjsonable_reason"])
def test_a_worker_that_dies_costs_only_its_own_item(folder, name):
    completions = ["die", "ok", "no", "ok", "no", "ok", "no", "ok"]
    out = judge(folder, name, completions)
    wanted = ["wrong" if name == "exit_after_reply" else "verifier_error"]  # that one dies after its reply
    wanted += ["ok" if c == "ok" else "wrong" for c in completions[1:]]
    assert outcomes(out) == wanted
    assert outcomes(judge(folder, name, ["ok", "no"])) == ["ok", "wrong"]  # and the pool still judges


def test_read_chars_and_reasons_are_clamped_to_what_they_can_mean(folder):
    (a,) = judge(folder, "read_past_the_end", ["abc"])
    assert (a.reason, a.read_chars) == ("ok", 3)
    (b,) = judge(folder, "claims_verifier_error", ["abc"])
    assert (b.reason, b.reward, b.read_chars) == ("verifier_error", 0.0, 0)


SURROGATES = r"""
from ratchet.verifiers import Verdict

def lone_surrogate(completion, record):
    text = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")  # what os-level text decoding hands back
    if completion == "raise":
        raise ValueError(text)
    return Verdict(correct=False, reward=0.0, reason="wrong", parsed=text, verifier="m", verifier_version="1")
"""


def test_text_the_store_cannot_hold_is_made_valid_utf8(folder):
    (folder / "surrogate_checks.py").write_text(SURROGATES)
    shutdown_pools()
    v = resolve_verifier("surrogate_checks:lone_surrogate", base_dir=folder)
    a, b = verify_plugin_batch(v, [("x", "{}"), ("raise", "{}")])
    assert a.reason == "wrong" and a.parsed.encode("utf-8") and a.parsed.startswith("caf")
    assert b.reason == "verifier_error" and b.details["error"].encode("utf-8") and "ValueError" in b.details["error"]


WRITES = r"""
def write(completion, record):
    if completion == "root":  # the sandbox's root is bwrap's own tmpfs (the binds' parent folders live there)
        open("/escaped.txt", "w").write("x")
    else:  # tmpfs pages count against no address-space limit: only the mount's own size bounds them
        with open("/tmp/big", "wb") as f:
            for _ in range(600):
                f.write(b"x" * (1 << 20))
    return True
"""


def test_a_sandboxed_verifier_writes_only_a_bounded_tmp(tmp_path):
    from ratchet.verifiers.code.sandbox import kernel_isolation_problem

    if (why := kernel_isolation_problem()) is not None:
        pytest.skip(f"no kernel sandbox here: {why}")
    folder = tmp_path / "inner"
    folder.mkdir()
    (folder / "write_checks.py").write_text(WRITES)
    shutdown_pools()
    v = resolve_verifier("write_checks:write", base_dir=folder, sandbox=True)
    fill, root = verify_plugin_batch(v, [("tmp", "{}"), ("root", "{}")], timeout_s=30)
    assert fill.reason == "verifier_error" and "No space left on device" in fill.details["error"]
    assert root.reason == "verifier_error" and "Read-only file system" in root.details["error"]
    shutdown_pools()


def test_odd_return_values_are_verifier_errors_or_clamped(folder):
    names = ["float_sub", "huge_int", "inf", "bad_bool", "correct_wrong", "unknown_reason", "negative_read", "big_parsed"]
    out = dict(zip(names, judge(folder, "odd_results", names)))
    for name in names[:6]:
        assert (out[name].reason, out[name].reward, out[name].read_chars) == ("verifier_error", 0.0, 0), name
    assert (out["negative_read"].reason, out["negative_read"].read_chars) == ("wrong", None)  # read: unknown, so all
    assert out["big_parsed"].reason == "wrong" and len(out["big_parsed"].parsed) == 4096


def test_a_worker_out_of_memory_is_replaced_and_its_item_judged_again(folder):
    completions = ["ok", "no"] * 6
    out = judge(folder, "leaks", completions)
    assert outcomes(out) == ["ok" if c == "ok" else "wrong" for c in completions]


def test_a_worker_that_stops_reading_its_requests_never_stalls_the_parent(folder):
    big = "ok" + "x" * 300_000  # more than a pipe holds: writing it to a worker that reads nothing would block
    assert outcomes(judge(folder, "stops_reading", ["stop", "stop"], timeout_s=3.0)) == ["wrong", "wrong"]
    time.sleep(0.5)  # both workers stopped, alive, idle in the pool
    t0 = time.monotonic()
    v = resolve_verifier("hostile_checks:stops_reading", base_dir=folder)
    out = verify_plugin_batch(v, [(big, "{}")] * 3, timeout_s=3.0)
    assert outcomes(out) == ["ok", "ok", "ok"] and time.monotonic() - t0 < 20
