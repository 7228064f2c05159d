"""What a sandboxed run sends back, checked and decoded in the parent (never trusted as sent).

Every record is validated (kind, field count, index in range and seen once, size, nesting depth) and
anything malformed raises :class:`Malformed`, which the verifier turns into a ``sandbox_violation``. A
value is decoded here only when it is small (:func:`decode`): then every operation on it is bounded; a
larger one is judged in the sandboxed judge run. See ``ratchet.verifiers.code`` for the judging scheme.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from ratchet.verifiers.code._harness import make_codec
from ratchet.verifiers.code.sandbox import RunResult

# The one value codec, shared with the sandbox side (``ratchet.verifiers.code._harness.make_codec``): probe values come back
# encoded by it, judge jobs get them encoded by it. The parent decodes a value only when it is small
# (``_shape``): then every operation on it is bounded; a larger one is judged in the sandboxed judge run.
_ENCODE, _DECODE = make_codec()
PARENT_DECODE_CHARS = 64 * 1024  # encoded size up to which the parent decodes a value to judge it itself
PARENT_HASHED_ITEMS = 256  # set items / dict keys up to which it does (equal-hash keys cost quadratic time)


def fast_judge(expr: ast.expr, values: list[Any]) -> bool | None:
    """Decide ``__p[k] == literal``, ``__p[k]`` and ``not __p[k]`` here; None when the judge run is needed.

    Never raises: a value that compares by raising (a signalling-NaN ``Decimal``) or that was not decoded
    here (too large) leaves the decision to the sandboxed judge run.
    """
    try:
        return _fast_judge_unguarded(expr, values)
    except Exception:  # a program value whose comparison raises: the judge run decides (and records the error)
        return None


def _fast_judge_unguarded(expr: ast.expr, values: list[Any]) -> bool | None:
    def probe(n: ast.expr) -> int | None:
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "__p":
            k = n.slice.value  # type: ignore[attr-defined]
            return None if values[k] is UNDECIDED else k  # type: ignore[no-any-return]
        return None

    if probe(expr) is not None:
        return bool(values[probe(expr)])  # type: ignore[index]
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not) and probe(expr.operand) is not None:
        return not values[probe(expr.operand)]  # type: ignore[index]
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.ops[0], (ast.Eq, ast.NotEq)):
        left, right = expr.left, expr.comparators[0]
        k, lit = (probe(left), right) if probe(left) is not None else (probe(right), left)
        if k is None:
            return None
        try:
            expected = ast.literal_eval(lit)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        same = bool(values[k] == expected)  # both sides are plain builtins rebuilt here, small (``_decode``)
        return same if isinstance(expr.ops[0], ast.Eq) else not same
    return None


# Records the harness may send: kind -> (min, max) number of fields after the kind.
_RECORD_FIELDS = {
    "start": (2, 2),
    "loaded": (0, 1),
    "exit": (1, 1),
    "load_error": (1, 2),
    "setup_error": (1, 1),
    "value": (2, 2),
    "error": (2, 3),  # index, exception type, message (a prep/judge error has no message)
    "judged": (2, 2),
    "judged_error": (2, 2),
    "violation": (1, 1),
    "done": (0, 0),
    "call": (2, 2),
    "checked": (1, 1),
}


class Malformed(Exception):
    """A record from the sandbox has the wrong shape; the run becomes a ``sandbox_violation``."""


def check_records(res: RunResult) -> None:
    """Shape check of every record (kind, field count, field size).

    Raises:
        Malformed: naming the first bad record.
    """
    for r in res.records:
        span = _RECORD_FIELDS.get(r[0])
        if span is None or not span[0] <= len(r) - 1 <= span[1]:
            raise Malformed(f"malformed record {r[0][:40]!r} with {len(r) - 1} fields")


def indexed(res: RunResult, kinds: tuple[str, ...], n: int) -> dict[int, list[str]]:
    """Records of ``kinds`` keyed by their index, each index in ``range(n)`` and seen once.

    Raises:
        Malformed: an index that is not a decimal in range, or a duplicate.
    """
    check_records(res)
    out: dict[int, list[str]] = {}
    for r in res.records:
        if r[0] in kinds:
            if not (r[1].isascii() and r[1].isdigit() and len(r[1]) < 10 and int(r[1]) < n):
                raise Malformed(f"record for index {r[1][:20]!r}, but there are {n} (harness tampering)")
            if int(r[1]) in out:
                raise Malformed(f"duplicate record for index {int(r[1])} (harness tampering)")
            out[int(r[1])] = r
    return out


_SCALAR_TAGS = {
    "none": 1,
    "bool": 2,
    "int": 2,
    "float": 2,
    "decimal": 2,
    "str": 2,
    "complex": 3,
    "bytes": 2,
    "bytearray": 2,
    "range": 4,
    "fraction": 3,
}
_HASHABLE_TAGS = {"none", "bool", "int", "float", "decimal", "str", "complex", "bytes", "range", "fraction", "tuple", "frozenset"}
_MAPPING_TAGS = {"dict", "counter", "ordereddict", "defaultdict", "items"}
_SEQUENCE_TAGS = {"list", "tuple", "set", "frozenset", "deque", "keys", "values", "iter"}


def shape(raw: str, max_nodes: int = 1_000_000, max_depth: int = 200) -> tuple[Any, int]:
    """One encoded value from a record, checked for shape without building it: ``(json, hashed items)``.

    Linear in the record's size: nothing is hashed or compared (a program's set of equal-hash ints costs
    nothing here). Checks every tag and field, the nesting depth and that dict keys and set items are
    hashable kinds; ``hashed items`` counts set items and dict keys (how costly a decode would be).

    Raises:
        Malformed: not JSON, nested too deep, too many nodes, or not a well-formed tagged value.
    """
    try:
        top = json.loads(raw)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise Malformed(f"malformed value record: {str(exc)[:120]}") from None
    hashed, nodes = 0, 0
    stack: list[tuple[Any, int, bool]] = [(top, 0, False)]
    while stack:
        x, depth, need_hash = stack.pop()
        nodes += 1
        if depth > max_depth or nodes > max_nodes:
            raise Malformed(f"malformed value record: nested deeper than {max_depth} levels or over {max_nodes} nodes")
        if type(x) is not list or not x or type(x[0]) is not str:
            raise Malformed(f"malformed value record: {str(x)[:60]!r} is not a tagged list")
        tag, n = x[0], len(x)
        if need_hash and tag not in _HASHABLE_TAGS:
            raise Malformed(f"malformed value record: an unhashable {tag[:20]!r} as a dict key or set item")
        if tag in _SCALAR_TAGS:
            ok = n == _SCALAR_TAGS[tag] and (tag == "none" or all(type(f) is (bool if tag == "bool" else str) for f in x[1:]))
            if not ok or any(type(f) is str and len(f) > 1_000_000 for f in x[1:]):
                raise Malformed(f"malformed value record: bad {tag!r} value")
            continue
        if n < 2 or type(x[1]) is not list:
            raise Malformed(f"malformed value record: unknown tag {tag[:20]!r} or wrong shape")
        if tag in _MAPPING_TAGS:
            if n != (3 if tag == "defaultdict" else 2) or (tag == "defaultdict" and x[2] is not None and type(x[2]) is not str):
                raise Malformed(f"malformed value record: bad {tag!r} value")
            for pair in x[1]:
                if type(pair) is not list or len(pair) != 2:
                    raise Malformed("malformed value record: a mapping entry that is not [key, value]")
                stack += [(pair[0], depth + 1, True), (pair[1], depth + 1, False)]
            hashed += len(x[1])
        elif tag in _SEQUENCE_TAGS:
            if n != (3 if tag == "deque" else 2) or (tag == "deque" and x[2] is not None and type(x[2]) is not int):
                raise Malformed(f"malformed value record: bad {tag!r} value")
            items_hash = tag in ("set", "frozenset", "keys")
            stack += [(y, depth + 1, items_hash or (need_hash and tag == "tuple")) for y in x[1]]
            hashed += len(x[1]) if items_hash else 0
        else:
            raise Malformed(f"malformed value record: unknown tag {tag[:20]!r}")
    return top, hashed


def decode(raw: str) -> Any:
    """One encoded value, decoded here when that is cheap; ``UNDECIDED`` when it is not (the judge run decodes it).

    Raises:
        Malformed: as :func:`_shape`, or the value does not decode.
    """
    top, hashed = shape(raw)
    if len(raw) > PARENT_DECODE_CHARS or hashed > PARENT_HASHED_ITEMS:
        return UNDECIDED
    try:
        return _DECODE(top)
    except (ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as exc:
        raise Malformed(f"malformed value record: {str(exc)[:120]}") from None


UNDECIDED = object()  # a value the parent does not decode itself (see ``_decode``)


def failure(res: RunResult) -> tuple[str, dict[str, Any]] | None:
    """Map sandbox-level events to (reason, details), or None when the run finished normally."""
    try:
        check_records(res)
    except Malformed as exc:
        return "sandbox_violation", {"violation": str(exc)}
    kinds = {r[0] for r in res.records}
    if "violation" in kinds:
        return "sandbox_violation", {"violation": next(r[1] for r in res.records if r[0] == "violation")[:300]}
    if res.forged_records:
        return "sandbox_violation", {"violation": f"{res.forged_records} forged result records (harness tampering)"}
    if res.output_exceeded:
        return "sandbox_violation", {"violation": "output limit exceeded", "output_exceeded": True}
    if res.disk_exceeded:
        return "sandbox_violation", {"violation": "disk quota exceeded", "disk_exceeded": True}
    if res.memory_exceeded:  # the cgroup's limit: the kernel killed a process of the run (SIGKILL, not a timeout)
        return "sandbox_violation", {"violation": "memory limit exceeded", "memory_exceeded": True}
    if res.timed_out or res.returncode in (-9, -24):
        return "timeout", {"timeout": True}
    mem = any(r[0] in ("load_error", "error") and "MemoryError" in r for r in res.records)
    if mem:
        return "sandbox_violation", {"violation": "memory limit exceeded", "memory_exceeded": True}
    if "load_error" in kinds or "exit" in kinds:
        rec = next(r for r in res.records if r[0] in ("load_error", "exit"))
        return "runtime_error", {"error": " ".join(rec[1:])[:300]}
    if "done" not in kinds:
        return "runtime_error", {"error": f"program ended before the tests ran (exit {res.returncode})"}
    return None
