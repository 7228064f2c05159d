"""The worker process a user's verifier runs in: one JSON request per stdin line, one JSON reply per stdout line.

A request is ``{"id", "ref", "base_dir", "completion", "record"}`` (``record``: the task record as JSON text); the
reply is ``{"id", "kind": "bool" | "float" | "verdict", ...}`` with the result, or ``{"id", "error": "<Type>: <message>"}``
when the verifier raised, could not be imported, or returned something that is not a ``bool``, a finite number or a
``ratchet.verifiers.Verdict``. What the verifier prints goes to stderr, never into the replies. The reply is bounded
(``MAX_TEXT_CHARS``); the parent (``ratchet.verifiers.plugins.runner``) validates it again and kills the worker at
the time limit. A call that runs out of memory ends the worker without a reply: the pool retries the item once on a
fresh worker, so a worker spent by earlier calls costs the next item nothing.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
from typing import Any

from ratchet.verifiers.plugins.loading import VERIFIER_GROUP, file_mtime, load_plugin
from ratchet.verifiers.verdict import Verdict

MAX_TEXT_CHARS = 4096  # a verdict's parsed answer / reason text, at most (the store keeps small rows)
MAX_ERROR_CHARS = 500  # an error message, at most
MAX_ABS_REWARD = 1e6  # a reward outside [-1e6, 1e6] is a verifier error (a bug, or an overflow)
WORKER_MEMORY_BYTES = 8 << 30  # address space per worker: a runaway verifier fails with MemoryError, not the host
MEMORY_EXIT = 75  # the worker's exit status when a call ran out of memory (it exits unanswered; see main)


def _error(e: BaseException | str) -> dict[str, Any]:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    return {"error": text[:MAX_ERROR_CHARS]}


def encode(result: Any) -> dict[str, Any]:
    """A verifier's return value as a reply, or an ``error`` reply for a value of the wrong type or range."""
    if isinstance(result, bool):
        return {"kind": "bool", "value": result}
    if isinstance(result, int | float):
        value = float(result)
        if not math.isfinite(value) or abs(value) > MAX_ABS_REWARD:
            return _error(f"ValueError: the verifier returned {value!r}; return a finite reward in [-1e6, 1e6]")
        return {"kind": "float", "value": value}
    if isinstance(result, Verdict):
        reward = float(result.reward)
        if not math.isfinite(reward) or abs(reward) > MAX_ABS_REWARD:
            return _error(f"ValueError: the verifier's Verdict has reward {reward!r}; use a finite reward in [-1e6, 1e6]")
        parsed = None if result.parsed is None else str(result.parsed)[:MAX_TEXT_CHARS]
        read = result.read_chars if isinstance(result.read_chars, int) and result.read_chars >= 0 else None
        return {
            "kind": "verdict",
            "correct": bool(result.correct),
            "reward": reward,
            "reason": result.reason,
            "parsed": parsed,
            "read_chars": read,
        }
    return _error(
        f"TypeError: the verifier returned {type(result).__name__}; return a bool, a float or a ratchet.verifiers.Verdict"
    )


def judge(req: dict[str, Any], cache: dict[tuple[str, str | None], tuple[Any, str | None, int | None]]) -> dict[str, Any]:
    """One request's reply (never raises for what the verifier does)."""
    key = (str(req["ref"]), req.get("base_dir"))
    try:
        if key not in cache or file_mtime(cache[key][1]) != cache[key][2]:  # new, or its file was edited: import again
            plugin = load_plugin(key[0], VERIFIER_GROUP, base_dir=key[1])
            cache[key] = (plugin.obj, plugin.source_file, file_mtime(plugin.source_file))
        record = json.loads(req["record"]) if req.get("record") else {}
        return encode(cache[key][0](str(req["completion"]), record))
    except MemoryError:  # the worker may be spent (a verifier that keeps what it read): main() ends it, unanswered
        raise
    except Exception as e:  # the verifier's failure is the reply: it becomes a verifier_error verdict, counted
        return _error(e)


def main() -> None:
    """Worker loop (``ratchet.verifiers._pool``): replies go to the original stdout; ``print`` goes to stderr."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    requests, out = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # a verifier that reads stdin cannot eat the requests
    os.dup2(2, 1)  # nor its prints (and its C libraries') corrupt the replies
    sys.stdin, sys.stdout = open(os.devnull), sys.stderr
    cache: dict[tuple[str, str | None], tuple[Any, str | None, int | None]] = {}
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in requests:
        req = json.loads(line)
        try:
            reply = judge(req, cache)
        except MemoryError:  # no reply: the pool starts a fresh worker and sends the item there once more, so only an
            os._exit(MEMORY_EXIT)  # item that exhausts a fresh worker too is charged (its verifier_error)
        try:
            text = json.dumps({**reply, "id": req["id"]})
        except (TypeError, ValueError) as e:  # a Verdict field JSON cannot hold (the parent checks every field too)
            text = json.dumps({**_error(f"TypeError: the verifier's result cannot be sent back: {e}"), "id": req["id"]})
        out.write(text + "\n")
        out.flush()


if __name__ == "__main__":
    main()
