"""A pool of killable worker processes speaking JSON lines, with a hard per-item timeout.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot kill one stuck task (sympy stuck in
C-level big-integer arithmetic ignores everything but SIGKILL), and a killed worker breaks the
whole executor. Why not ``multiprocessing`` spawn: it re-imports the caller's ``__main__``, which
breaks unguarded training scripts. Here each worker is a plain ``subprocess.Popen`` of
``python -c "...main()"``; an item that runs past its deadline gets its worker SIGKILLed and a fresh
worker is started for the next item. No ``signal.alarm``: it only works in the main thread and
cannot interrupt C code.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ratchet.common.procs import kill_tree

log = logging.getLogger(__name__)

_ROOT = str(Path(__file__).resolve().parents[1])
STARTUP_TIMEOUT_S = 60.0  # importing sympy + ANTLR on a busy 2-core machine can take several seconds
MAX_REPLY_BYTES = 1 << 20  # one reply line, at most: a worker that sends more is killed (its item: an error reply)
MAX_ATTEMPTS = 2  # an item whose worker died is tried once more on a fresh worker before the death is its own


def serve_json_lines(judge: Callable[[Any, Any], dict]) -> None:
    """A worker's side of the protocol: say ready, then answer each stdin line ``{"id", "gold", "pred"}`` with
    ``judge(gold, pred)`` and its ``id`` on one stdout line, until stdin closes."""
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        reply = judge(req["gold"], req["pred"])
        reply["id"] = req["id"]
        out.write(json.dumps(reply) + "\n")
        out.flush()


class _Worker:
    """One worker process and its line buffer."""

    def __init__(self, module: str, launcher: Callable[[list[str]], list[str]] | None = None) -> None:
        code = f"import sys; sys.path.insert(0, {_ROOT!r}); from {module} import main; main()"
        argv = [sys.executable, "-c", code]
        self.proc = subprocess.Popen(
            launcher(argv) if launcher is not None else argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.in_fd = self.proc.stdin.fileno()
        os.set_blocking(self.in_fd, False)  # a worker that stops reading must never block the parent's write
        self.buf = bytearray()
        self.ready = False

    def send(self, obj: dict[str, Any], timeout_s: float) -> bool:
        """Write one request within ``timeout_s``; False when the worker is gone (its stdin is closed) or has not
        taken the request by then (stopped, or its code holds the interpreter)."""
        data = memoryview((json.dumps(obj) + "\n").encode())
        deadline = time.monotonic() + timeout_s
        while data:
            try:
                data = data[os.write(self.in_fd, data) :]
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                select.select([], [self.in_fd], [], min(left, 0.5))
            except (BrokenPipeError, OSError, ValueError):
                return False
        return True

    def pump(self) -> list[dict[str, Any]]:
        """Read what is available; return its complete lines that are JSON objects (any other line is dropped: the
        worker runs code that may write to its reply stream, and nothing it sends is trusted).

        Raises:
            EOFError: the worker closed its replies (it died, or its code closed them).
            OverflowError: a line longer than ``MAX_REPLY_BYTES``.
        """
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        if not chunk:
            raise EOFError("worker exited")
        self.buf += chunk
        *lines, rest = self.buf.split(b"\n")
        if len(rest) > MAX_REPLY_BYTES or any(len(line) > MAX_REPLY_BYTES for line in lines):
            raise OverflowError(f"a reply line over {MAX_REPLY_BYTES} bytes")
        self.buf = bytearray(rest)
        out = []
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:  # not JSON, not UTF-8
                continue
            if isinstance(msg, dict):
                out.append(msg)
        return out

    def kill(self) -> None:
        kill_tree(self.proc)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()  # type: ignore[union-attr]
            except OSError:
                pass


class WorkerPool:
    """Runs ``main()`` of ``module`` in up to ``size`` processes; see ``run``.

    ``launcher`` (optional) rewrites each worker's command line, e.g. to start it inside a sandbox
    (``ratchet.verifiers.plugins.runner``). Thread-safe: concurrent callers are serialized by a lock (each call
    already uses every worker).
    """

    def __init__(self, module: str, size: int, launcher: Callable[[list[str]], list[str]] | None = None) -> None:
        self.module, self.size, self.launcher = module, max(1, size), launcher
        self.workers: list[_Worker] = []
        self.lock = threading.Lock()

    def _start(self, n: int) -> None:
        """Ensure ``n`` live, ready workers (started in parallel, startup not charged to items)."""
        self.workers = [w for w in self.workers if w.proc.poll() is None]
        while len(self.workers) < n:
            self.workers.append(_Worker(self.module, self.launcher))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for w in self.workers:
            while not w.ready:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"worker {self.module} did not start within {STARTUP_TIMEOUT_S} s; check that "
                        f"`python -c 'import {self.module}'` works in {sys.executable}"
                    )
                sel = selectors.DefaultSelector()
                sel.register(w.fd, selectors.EVENT_READ)
                sel.select(0.1)
                sel.close()
                try:
                    msgs = w.pump()
                except EOFError:
                    raise RuntimeError(
                        f"worker {self.module} died at startup (python {sys.executable}); run "
                        f"`python -c 'import {self.module}'` to see why"
                    ) from None
                w.ready = any(m.get("ready") for m in msgs) or w.ready

    def run(self, requests: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any] | None]:
        """Send each request to a worker; return replies in order, None where the item timed out.

        Args:
            requests: JSON-able dicts (an ``id`` field is added: a fresh random token per send, which the worker
                echoes; a reply with any other id is dropped, so a line written for another item, or left over from an
                earlier one, is never taken as an item's reply).
            timeout_s: hard wall-clock limit per item, seconds, counted from when it was sent.

        A worker that closes its replies (dies) is killed and replaced; its item is tried once more on a fresh worker
        (``MAX_ATTEMPTS``), so a worker killed by something other than its item (a thread of the previous one) costs
        that item nothing; an item whose worker dies on every attempt gets an ``error`` reply, as does one whose
        worker sends a line over ``MAX_REPLY_BYTES`` (killed at once).
        """
        if not requests:
            return []
        with self.lock:
            return self._run(requests, timeout_s)

    def _run(self, requests: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any] | None]:
        self._start(min(self.size, len(requests)))
        results: list[dict[str, Any] | None] = [None] * len(requests)
        todo = list(range(len(requests)))[::-1]
        attempts = [0] * len(requests)
        busy: dict[int, tuple[_Worker, float, str]] = {}  # item -> (worker, deadline, the id its reply must carry)
        idle = list(self.workers)
        sel = selectors.DefaultSelector()

        def drop(w: _Worker) -> None:  # kill a worker and start its replacement when items still wait
            w.kill()
            if w in self.workers:
                self.workers.remove(w)
            if todo:
                self._start(len(self.workers) + 1)
                idle.append(self.workers[-1])

        def died(i: int, w: _Worker, why: str) -> None:
            sel.unregister(w.fd)
            del busy[i]
            if attempts[i] < MAX_ATTEMPTS and why == "exited":
                todo.append(i)  # next to be sent, to a live worker
            else:
                results[i] = {"reason": "timeout", "error": f"worker died (memory limit or crash): {why}"}
            drop(w)

        try:
            while todo or busy:
                if todo and not idle and not busy:  # every worker died: start fresh ones
                    self._start(min(self.size, len(todo)))
                    idle = list(self.workers)
                while todo and idle:
                    w, i = idle.pop(), todo.pop()
                    token = f"{i}.{secrets.token_hex(8)}"
                    attempts[i] += 1
                    if w.proc.poll() is not None or not w.send({**requests[i], "id": token}, timeout_s):
                        todo.append(i)  # it never reached a worker that reads: try another (each try counts)
                        if attempts[i] > MAX_ATTEMPTS:
                            todo.pop()
                            results[i] = {"reason": "timeout", "error": "worker died (memory limit or crash): it "
                                          "took no request"}  # fmt: skip
                        drop(w)
                        continue
                    busy[i] = (w, time.monotonic() + timeout_s, token)
                    sel.register(w.fd, selectors.EVENT_READ, i)
                if not busy:
                    continue
                wait = max(0.0, min(d for _, d, _ in busy.values()) - time.monotonic())
                for key, _ in sel.select(wait):
                    i = key.data
                    if i not in busy:  # its worker was dropped earlier in this pass
                        continue
                    w, _, token = busy[i]
                    try:
                        msgs = w.pump()
                    except EOFError:
                        died(i, w, "exited")
                        continue
                    except OverflowError as e:
                        died(i, w, str(e))
                        results[i] = {"error": f"ProtocolError: the worker sent {e}; it was killed"}
                        continue
                    reply = next((m for m in msgs if m.get("id") == token), None)
                    if reply is not None:
                        results[i] = {**reply, "id": i}
                        sel.unregister(w.fd)
                        del busy[i]
                        w.buf.clear()  # whatever else it sent with the reply is stale
                        if w.proc.poll() is None:
                            idle.append(w)
                        else:
                            drop(w)
                now = time.monotonic()
                for i, (w, deadline, _) in list(busy.items()):
                    if now >= deadline:
                        sel.unregister(w.fd)
                        del busy[i]
                        log.info("%s worker killed after %.2f s on item %d", self.module, timeout_s, i)
                        drop(w)
        finally:
            sel.close()
        self.workers = [w for w in self.workers if w.proc.poll() is None]
        return results

    def close(self) -> None:
        """Kill every worker."""
        with self.lock:
            for w in self.workers:
                w.kill()
            self.workers = []
