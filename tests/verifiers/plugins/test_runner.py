"""A user's verifier in real worker processes: found by ``module:function`` or an entry point, a verifier that raises,
hangs, returns garbage or prints, the sandbox, and an edited plugin file as a new version."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from ratchet.verifiers.plugins import PluginError
from ratchet.verifiers.plugins.runner import resolve_verifier, shutdown_pools, to_verdict, verify_plugin_batch
from ratchet.verifiers.verdict import Verdict

CHECKS = """
import sys, time
from ratchet.verifiers import Verdict
__version__ = "1.2"

def exact(completion, record):
    return completion.strip() == record["reference"]

def graded(completion, record):
    return len(completion) / 10

def verdict(completion, record):
    return Verdict(correct=False, reward=0.25, reason="wrong", parsed=completion[:3], verifier="mine", verifier_version="x")

def boom(completion, record):
    return 1 / 0

def hang(completion, record):
    time.sleep(60)

def garbage(completion, record):
    return {"reward": 1}

def nan(completion, record):
    return float("nan")

def chatty(completion, record):
    print("debug output that must not reach the reply stream")
    sys.stdout.write("{not json\\n")
    return True

def write_home(completion, record):
    import pathlib
    pathlib.Path(__file__).with_name("written.txt").write_text("x")
    return True
"""


@pytest.fixture()
def plugin_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_checks.py").write_text(CHECKS)
    return tmp_path


def run(ref: str, folder: Path, items, timeout_s: float = 10.0, **kw):
    v = resolve_verifier(ref, base_dir=folder, **kw)
    return v, verify_plugin_batch(v, [(c, json.dumps(r)) for c, r in items], timeout_s=timeout_s)


def test_module_function_from_the_config_folder_named_and_versioned(plugin_dir):
    v, out = run("my_checks:exact", plugin_dir, [("42", {"reference": "42"}), ("41", {"reference": "42"})])
    assert v.name == "plugin:my_checks:exact" and v.version.startswith("1.2+") and len(v.version) == len("1.2+") + 16
    assert [(x.correct, x.reward, x.reason, x.verifier, x.verifier_version) for x in out] == [
        (True, 1.0, "ok", v.name, v.version),
        (False, 0.0, "wrong", v.name, v.version),
    ]


def test_float_and_verdict_results_map_as_documented(plugin_dir):
    _, (a, b) = run("my_checks:graded", plugin_dir, [("12345", {}), ("1234567890abc", {})])
    assert (a.reward, a.correct, a.reason) == (0.5, False, "wrong") and (b.reward, b.correct, b.reason) == (1.3, True, "ok")
    v, (c,) = run("my_checks:verdict", plugin_dir, [("abcdef", {})])
    assert (c.reward, c.reason, c.parsed, c.verifier, c.verifier_version) == (0.25, "wrong", "abc", v.name, v.version)


@pytest.mark.parametrize(
    ("ref", "needle"),
    [("boom", "ZeroDivisionError"), ("garbage", "TypeError: the verifier returned dict"), ("nan", "ValueError")],
)
def test_raising_or_garbage_is_a_verifier_error_not_a_crash(plugin_dir, ref, needle):
    _, (x,) = run(f"my_checks:{ref}", plugin_dir, [("1", {})])
    assert (x.reason, x.reward, x.correct, x.read_chars, x.parsed) == ("verifier_error", 0.0, False, 0, None)
    assert needle in x.details["error"]


def test_a_hanging_verifier_is_killed_at_its_limit_and_the_next_call_works(plugin_dir):
    t0 = time.monotonic()
    _, out = run("my_checks:hang", plugin_dir, [("1", {}), ("2", {})], timeout_s=1.0)
    assert time.monotonic() - t0 < 15  # two 1 s limits, the worker restarts between them; never 60 s
    assert [x.reason for x in out] == ["verifier_error"] * 2 and "TimeoutError" in out[0].details["error"]
    _, (ok,) = run("my_checks:exact", plugin_dir, [("7", {"reference": "7"})])
    assert ok.correct


def test_prints_do_not_corrupt_the_replies(plugin_dir):
    _, out = run("my_checks:chatty", plugin_dir, [("a", {}), ("b", {})])
    assert [x.correct for x in out] == [True, True]


@pytest.mark.parametrize(
    "reply",
    [
        {"kind": "bool", "value": 1},
        {"kind": "float", "value": float("inf")},
        {"kind": "float", "value": True},
        {"kind": "verdict", "correct": True, "reward": 1.0, "reason": "wrong", "parsed": None},
        {"kind": "verdict", "correct": False, "reward": 0.0, "reason": "made_up", "parsed": None},
        {"kind": "verdict", "correct": False, "reward": 0.0, "reason": "wrong", "parsed": "x" * 5000},
        {"kind": "verdict", "correct": False, "reward": 0.0, "reason": "wrong", "parsed": None, "read_chars": -1},
        [],
    ],
)
def test_the_parent_validates_every_reply_again(plugin_dir, reply):
    v = resolve_verifier("my_checks:exact", base_dir=plugin_dir)
    assert to_verdict(reply, v, 1.0).reason == "verifier_error"


def test_a_bad_reference_fails_before_any_work_with_the_fix(plugin_dir):
    with pytest.raises(PluginError, match="cannot import module 'nope'"):
        resolve_verifier("nope:verify", base_dir=plugin_dir)
    with pytest.raises(PluginError, match="has no 'missing'"):
        resolve_verifier("my_checks:missing", base_dir=plugin_dir)
    with pytest.raises(PluginError, match="no entry point of that name.*installed: .*math"):
        resolve_verifier("no_such_entry_point")
    with pytest.raises(PluginError, match="not a function"):
        resolve_verifier("my_checks:__version__", base_dir=plugin_dir)


def test_an_edited_plugin_file_is_a_new_version(plugin_dir):
    before = resolve_verifier("my_checks:exact", base_dir=plugin_dir).version
    (plugin_dir / "my_checks.py").write_text(CHECKS + "\n# a fix\n")
    after = resolve_verifier("my_checks:exact", base_dir=plugin_dir).version
    assert before != after and before.split("+")[0] == after.split("+")[0] == "1.2"


def test_the_builtin_math_verifier_is_an_entry_point():
    v = resolve_verifier("math")
    out = verify_plugin_batch(v, [("Answer: 4", json.dumps({"answer": "4"})), ("Answer: 5", json.dumps({"reference": "4"}))])
    assert v.name == "plugin:math" and [x.reason for x in out] == ["ok", "wrong"]


def _install_dist(site: Path) -> None:
    """A tiny package installed the way pip leaves it: the module and a ``*.dist-info`` with ``entry_points.txt``."""
    (site / "acme_checks.py").write_text("version = '3'\ndef verify(completion, record):\n    return 'yes' in completion\n")
    info = site / "acme_checks-3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-checks\nVersion: 3.0\n")
    (info / "entry_points.txt").write_text("[ratchet.verifiers]\nacme = acme_checks:verify\n")
    (info / "RECORD").write_text("")


def test_an_installed_entry_point_is_found_by_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    _install_dist(site)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    shutdown_pools()  # fresh workers see the new site folder
    try:
        v = resolve_verifier("acme")
        out = verify_plugin_batch(v, [("yes!", "{}"), ("no", "{}")])
    finally:
        shutdown_pools()
        sys.modules.pop("acme_checks", None)
    assert v.name == "plugin:acme" and v.version.startswith("3+") and [x.correct for x in out] == [True, False]


def _kernel_sandbox_problem() -> str | None:
    from ratchet.verifiers.code.sandbox import kernel_isolation_problem

    return kernel_isolation_problem()


def test_sandbox_runs_the_verifier_with_a_read_only_view(plugin_dir):
    if (why := _kernel_sandbox_problem()) is not None:
        pytest.skip(f"no kernel sandbox here: {why}")
    _, (inside,) = run("my_checks:write_home", plugin_dir, [("1", {})], sandbox=True, timeout_s=30)
    assert inside.reason == "verifier_error" and "Read-only file system" in inside.details["error"]
    assert not (plugin_dir / "written.txt").exists()
    _, (ok,) = run("my_checks:exact", plugin_dir, [("7", {"reference": "7"})], sandbox=True, timeout_s=30)
    assert ok.correct
    _, (outside,) = run("my_checks:write_home", plugin_dir, [("1", {})])
    assert outside.correct and (plugin_dir / "written.txt").exists()


def test_verdict_type_is_the_public_one():
    from ratchet.verifiers import Verdict as Public

    assert Public is Verdict


def test_a_same_size_edit_within_a_second_runs_the_new_code(plugin_dir):
    _, (before,) = run("my_checks:exact", plugin_dir, [("7", {"reference": "7"})])
    (plugin_dir / "my_checks.py").write_text(CHECKS.replace("== record", "!= record"))  # same size, same second
    _, (after,) = run("my_checks:exact", plugin_dir, [("7", {"reference": "7"})])
    assert before.correct and not after.correct and before.verifier_version != after.verifier_version
