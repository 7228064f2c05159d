"""Child side of the code sandbox. Run as ``python -S -s -B -P _harness.py JOBFILE RESULT_FD``.

Standalone on purpose (stdlib only, no ``verifiers`` import). In kernel mode it already runs inside
bubblewrap's namespaces (``verifiers/code/sandbox.py``); in weak mode it starts as root (or the caller's
user). Before any untrusted code it:

1. reads the job file (JSON) and deletes it, closes every inherited descriptor but the result fd;
2. weak mode only: leaves the network namespace and, as root, drops to the job's unprivileged uid;
3. sets resource limits (CPU s, address space, process count, file size, open files, no core);
4. installs an audit hook (PEP 578) as an inner layer (a program can disable it; the kernel wall
   does not depend on it);
5. runs the job and writes tab-separated records ``<secret>\t...`` to RESULT_FD.

Modes: ``prep`` and ``judge`` run trusted test code only (setup statements, expected values,
reference helpers) and never model code; ``assert`` runs the program, the setup statements that
use its names, and the *probes* (candidate-dependent sub-expressions, with setup-defined values
given as plain data ``__a[k]``); ``stdio`` runs the program on stdin. Records never carry a
verdict: the parent validates them and decides. Values must be plain data (checked with
``type(v) is T``, never ``==`` or ``isinstance``), so objects with an always-true ``__eq__`` cannot pass.
"""

import json
import os
import resource
import sys

CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
VIOLATION_EXIT = 86
_BLOCKED = (
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "subprocess.Popen",
    "pty.spawn",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "socket.",
    "ctypes.",
    "os.setuid",
    "os.setgid",
    "os.chroot",
    "os.putenv",
    "os.unsetenv",
    "sys.setprofile",
    "sys.settrace",
    "sys.addaudithook",
    "os.startfile",
    "webbrowser.open",
    "mmap.__new__",
)
_PATH_EVENTS = {
    "os.remove": True,
    "os.rename": True,
    "os.rmdir": True,
    "os.mkdir": True,
    "os.chmod": True,
    "os.chown": True,
    "os.link": True,
    "os.symlink": True,
    "os.truncate": True,
    "os.utime": True,
    "shutil.rmtree": True,
    "shutil.copyfile": True,
    "shutil.move": True,
    "os.listdir": False,
    "os.scandir": False,
}


def _lockdown(job):
    lim = job["limits"]
    net = "bwrap"
    if not job.get("kernel"):
        net = "none"
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if job.get("no_network", True):
            if os.geteuid() == 0 and libc.unshare(CLONE_NEWNET) == 0:
                net = "netns"
            elif os.geteuid() != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
                net = "userns+netns"
    for res, value in (
        (resource.RLIMIT_CPU, lim["cpu_s"]),
        (resource.RLIMIT_AS, lim["memory_bytes"]),
        (resource.RLIMIT_NPROC, lim["nproc"]),
        (resource.RLIMIT_FSIZE, lim["file_bytes"]),
        (resource.RLIMIT_NOFILE, lim["nofile"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(res, (value, value))
    uid = job.get("uid")
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return net


def _install_hook(secret, result_fd, workdir, read_roots):
    write, exit_, realpath, sep = os.write, os._exit, os.path.realpath, os.sep
    blocked, path_events = _BLOCKED, _PATH_EVENTS

    def inside(path, roots):
        try:
            p = realpath(os.fsdecode(path)) if not isinstance(path, int) else None
        except (TypeError, ValueError):
            return False
        return p is None or any(p == r or p.startswith(r + sep) for r in roots)

    def violate(event):
        write(result_fd, f"{secret}\tviolation\t{event}\n".encode())
        exit_(VIOLATION_EXIT)

    def hook(event, args):
        if event.startswith(blocked):
            violate(event)
        elif event == "open":
            path, mode, flags = args
            writing = (
                "w" in str(mode)
                or "a" in str(mode)
                or "x" in str(mode)
                or "+" in str(mode)
                or (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            )
            if not inside(path, [workdir] if writing else [workdir] + read_roots):
                violate(f"open {'write' if writing else 'read'} {os.fsdecode(path) if not isinstance(path, int) else path}")
        elif event in path_events and args and not inside(args[0], [workdir] if path_events[event] else [workdir] + read_roots):
            violate(f"{event} {args[0]!r}")

    sys.addaudithook(hook)


_ITER_SAMPLES = ("", (), [], {}, set(), frozenset(), range(0), b"", bytearray())


def make_codec(max_depth=200):
    """The one value codec of the sandbox: plain builtin values <-> JSON-able tagged lists.

    Used by both sides: the harness encodes probe values (no candidate method is called: types are
    checked with ``type(v) is T``, containers are read through the builtin type's own methods), the
    parent and the judge decode them. Python's own equality then holds on the decoded values:
    ``Counter`` == dict, ``range``/``defaultdict``/``OrderedDict``/``deque`` keep their type, and an
    iterator (generator, ``map``, ``filter``, ``zip``, ...) becomes an iterator over its items, so
    ``set(gen) == {...}`` holds while ``gen == [...]`` stays False, as in plain Python.

    Returns:
        ``(enc, dec)``: ``enc(value, budget)`` -> tagged list (``budget = [n]`` nodes at most;
        ValueError past it, TypeError for a value that is not plain data); ``dec(tagged)`` -> value,
        raising ValueError for anything malformed (unknown tag, wrong shape, nesting deeper than
        ``max_depth``, an unhashable dict key or set item). The program's process only encodes: what
        it sends is decoded by the parent and the judge, never beside the program.
    """
    import collections
    import decimal
    import fractions
    import itertools
    import types

    t, hexf, frepr, items = type, int.__format__, float.__repr__, dict.items
    seq_types = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
    map_types = {dict: "dict", collections.Counter: "counter", collections.OrderedDict: "ordereddict"}
    views = {t({}.keys()): "keys", t({}.values()): "values", t({}.items()): "items"}
    iter_types = {t(iter(x)) for x in _ITER_SAMPLES} | {t(iter({}.values())), t(iter({}.items())), t(reversed([]))}
    iter_types |= {types.GeneratorType, map, filter, zip, enumerate, reversed}
    iter_types |= {v for v in vars(itertools).values() if t(v) is type and v.__module__ == "itertools"}
    factories = {f.__name__: f for f in (int, float, str, list, tuple, set, frozenset, dict, bool)}

    def enc(v, budget):
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError("value too large to serialize")
        k = t(v)
        if v is None:
            return ["none"]
        if k is bool:
            return ["bool", v is True]
        if k is int:
            return ["int", hexf(v, "x")]
        if k is float:
            return ["float", frepr(v)]
        if k is str:
            return ["str", str.__str__(v)]
        if k is complex:
            return ["complex", frepr(v.real), frepr(v.imag)]
        if k is bytes:
            return ["bytes", bytes.hex(v)]
        if k is bytearray:
            return ["bytearray", bytearray.hex(v)]
        if k is range:
            return ["range", hexf(v.start, "x"), hexf(v.stop, "x"), hexf(v.step, "x")]
        if k is fractions.Fraction:
            return ["fraction", hexf(v.numerator, "x"), hexf(v.denominator, "x")]
        if k is decimal.Decimal:
            return ["decimal", decimal.Decimal.__str__(v)]
        if k in seq_types:
            return [seq_types[k], [enc(x, budget) for x in list(v)]]
        if k is collections.deque:
            return ["deque", [enc(x, budget) for x in list(v)], v.maxlen]
        if k in map_types or k is collections.defaultdict:
            pairs = [[enc(a, budget), enc(b, budget)] for a, b in items(v)]
            if k is collections.defaultdict:
                f = v.default_factory
                return ["defaultdict", pairs, f.__name__ if any(f is g for g in factories.values()) else None]
            return [map_types[k], pairs]
        if k in views:
            return [views[k], [enc(x, budget) for x in list(v)]]
        if k in iter_types:
            out = []
            for x in v:  # runs a generator's body: only ever in the sandbox
                out.append(enc(x, budget))
            return ["iter", out]
        raise TypeError(f"value of type {k.__name__} is not plain data (int/float/str/list/tuple/dict/set/Counter/...)")

    def num(s, base=16):
        if t(s) is not str or len(s) > 100_000:
            raise ValueError(f"malformed number field {str(s)[:40]!r}")
        return int(s, base)

    def dec(x, depth=0):
        if depth > max_depth:
            raise ValueError(f"value nested deeper than {max_depth} levels")
        if t(x) is not list or not x or t(x[0]) is not str:
            raise ValueError(f"malformed value {str(x)[:60]!r}: expected a tagged list")
        tag, n = x[0], len(x)
        try:
            if tag == "none" and n == 1:
                return None
            if tag == "bool" and n == 2 and t(x[1]) is bool:
                return x[1]
            if tag == "int" and n == 2:
                return num(x[1])
            if tag in ("float", "decimal", "str") and n == 2 and t(x[1]) is str:
                return {"float": float, "decimal": decimal.Decimal, "str": str}[tag](x[1])
            if tag == "complex" and n == 3 and t(x[1]) is str and t(x[2]) is str:
                return complex(float(x[1]), float(x[2]))
            if tag in ("bytes", "bytearray") and n == 2 and t(x[1]) is str:
                return {"bytes": bytes, "bytearray": bytearray}[tag].fromhex(x[1])
            if tag == "range" and n == 4:
                return range(num(x[1]), num(x[2]), num(x[3]))
            if tag == "fraction" and n == 3:
                return fractions.Fraction(num(x[1]), num(x[2]))
            if n >= 2 and t(x[1]) is list:
                return dec_container(tag, x, n, depth)
        except (TypeError, ArithmeticError, decimal.InvalidOperation) as exc:
            raise ValueError(f"malformed {tag!r} value: {exc}") from None
        raise ValueError(f"malformed value: unknown tag {tag[:20]!r} or wrong shape")

    def dec_container(tag, x, n, depth):
        if tag in ("dict", "counter", "ordereddict", "defaultdict", "items"):
            pairs = []
            for p in x[1]:
                if t(p) is not list or len(p) != 2:
                    raise ValueError("malformed mapping entry: expected [key, value]")
                pairs.append((dec(p[0], depth + 1), dec(p[1], depth + 1)))
            if tag == "defaultdict" and n == 3 and (x[2] is None or x[2] in factories):
                return collections.defaultdict(factories.get(x[2]), pairs)
            cls = {"dict": dict, "counter": collections.Counter, "ordereddict": collections.OrderedDict, "items": dict}
            if tag in cls and n == 2:
                out = cls[tag](dict(pairs)) if tag == "counter" else cls[tag](pairs)
                return out.items() if tag == "items" else out
            raise ValueError(f"malformed {tag!r} value")
        elems = [dec(y, depth + 1) for y in x[1]]
        if tag == "deque" and n == 3 and (x[2] is None or t(x[2]) is int):
            return collections.deque(elems, x[2])
        if n != 2:
            raise ValueError(f"malformed {tag!r} value")
        if tag == "keys":
            return dict.fromkeys(elems).keys()
        if tag == "values":
            return dict(enumerate(elems)).values()
        if tag == "iter":
            return iter(elems)
        if tag in ("list", "tuple", "set", "frozenset"):
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](elems)
        raise ValueError(f"malformed value: unknown tag {tag[:20]!r}")

    return enc, dec


def _trusted(job, emit):
    """``prep``/``judge``: run setup and evaluate expressions; no model code runs in this process."""
    import builtins

    enc, dec = make_codec()
    ns = {"__builtins__": builtins, "__p": [dec(v) for v in job.get("values", [])], "__a": [dec(v) for v in job.get("args", [])]}
    for stmt in job["setup"]:
        exec(compile(stmt, "<setup>", "exec"), ns)
    for i, expr in enumerate(job["exprs"]):
        try:
            value = eval(compile(expr, "<test>", "eval"), ns)
            if job["mode"] == "judge":
                emit("judged", i, bool(value))
            else:
                ns["__a"].append(value)  # a later argument may project an earlier one
                emit("value", i, json.dumps(enc(value, [1_000_000])))
        except Exception as exc:  # a test that raises is a failed test; recorded, not hidden
            if job["mode"] == "prep":
                ns["__a"].append(None)
            emit("judged_error" if job["mode"] == "judge" else "error", i, type(exc).__name__)
    emit("done")


class _Diverged(Exception):
    """A replayed call's arguments differ from the recorded ones: the test's calls depend on results."""


class _TooManyCalls(BaseException):
    """One check run called the candidate more than ``MAX_CHECK_CALLS`` times (a loop over ``range(400000000)``)."""


MAX_CHECK_CALLS = 20_000  # calls of one check run: each is a record (under the 4 MiB cap) and a probe of the program


def _check(job, emit):
    """``check``: run a test's ``check(candidate)`` with ``candidate`` a proxy; no model code here.

    Call ``i`` is answered from ``job["answers"][i]`` (arguments as recorded, then ``value`` or
    ``error``, from a program run); a call past the answers is emitted as a ``call`` record and
    returns a placeholder, after which the test is speculative: asserts (rewritten by the parent to
    ``__ratchet_assert(lambda: ...)``) no longer fail, and any other exception ends the run.
    """
    import builtins
    import random

    random.seed(0)  # an unseeded random test makes the same calls in every round, so answers replay
    enc, dec = make_codec()
    answers, calls, state = job["answers"], [0], {"spec": False}

    def candidate(*a, **kw):
        i, calls[0] = calls[0], calls[0] + 1
        if i >= MAX_CHECK_CALLS:
            raise _TooManyCalls
        if i < len(answers):
            args, kind, value = answers[i]
            if dec(args) != [list(a), kw]:
                raise _Diverged(i)
            if kind == "error":
                raise RuntimeError("the program raised " + value)
            return dec(value)
        emit("call", i, json.dumps(enc([list(a), kw], [1_000_000])))
        state["spec"] = True
        return object()

    def soft_assert(test, msg=None):
        try:
            ok = test()
        except Exception:
            if state["spec"]:
                return
            raise
        if not ok and not state["spec"]:
            raise AssertionError(msg)

    ns = {"__builtins__": builtins, "__name__": "__test__", "__ratchet_assert": soft_assert}
    try:
        exec(compile(job["test"], "<test>", "exec"), ns)
        ns[job["check"]](candidate)
        outcome = "incomplete" if state["spec"] else "pass"
    except _Diverged:
        outcome = "diverged"
    except _TooManyCalls:
        outcome = "too_many_calls"
    except Exception as exc:  # a failing check is data for the verdict
        lines = [f.tb_lineno for f in _frames(exc.__traceback__) if f.tb_frame.f_code.co_filename == "<test>"]
        where = f"@{lines[-1]}" if lines else ""  # the test's line that failed (the parent quotes it)
        outcome = "incomplete" if state["spec"] else "fail:" + type(exc).__name__ + where
    emit("checked", outcome)
    emit("done")


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def _read_roots():
    return sorted(
        {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
        | {
            os.path.realpath(__file__),  # tracebacks of a crashing program quote this file
            os.path.realpath(sys.prefix),
            os.path.realpath(sys.base_prefix),
            "/dev/null",
            "/dev/urandom",
            "/usr/share/zoneinfo",
            "/etc/localtime",
        }
    )


def _candidate(job, emit, secret, result_fd, workdir):
    """``assert``/``stdio``: run the program, then (assert) the candidate-side setup and the probes."""
    import builtins
    import traceback

    pristine = dict(vars(builtins))
    enc, dec = make_codec()
    args = [None if v is None else dec(v) for v in job.get("args", [])]  # None: an argument only the judge sees
    if job.get("audit", True):
        _install_hook(secret, result_fd, workdir, _read_roots())
    g = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "<candidate>", "exec"), g)
        emit("loaded")
    except SystemExit as exc:
        emit("loaded" if exc.code in (None, 0) else "exit", repr(exc.code)[:100])
    except MemoryError:
        emit("load_error", "MemoryError")
    except BaseException as exc:  # the candidate's crash is data for the verdict
        emit("load_error", type(exc).__name__, traceback.format_exc(limit=3)[-300:].replace("\n", " | ").replace("\t", " "))
    if job["mode"] == "stdio":
        sys.stdout.flush()
        emit("done")
        return
    # Only the task's entry points are taken from the program; probes are entry-point calls whose values go
    # back as plain data (methods and comparisons on them run in the judge, never here).
    ns = {k: g[k] for k in job["candidate_names"] if k in g}
    ns["__builtins__"], ns["__a"] = pristine, args
    for stmt in job["setup"]:  # only setup lines that use the program's names; no expected values
        try:
            exec(compile(stmt, "<setup>", "exec"), ns)
        except BaseException as exc:
            emit("setup_error", type(exc).__name__)
    for i, probe in enumerate(job["probes"]):
        try:
            value = eval(compile(probe, "<probe>", "eval"), ns)
            emit("value", i, json.dumps(enc(value, [1_000_000])))
        except MemoryError:
            emit("error", i, "MemoryError")
        except BaseException as exc:  # includes SystemExit from the candidate: the probe failed
            emit("error", i, type(exc).__name__, str(exc)[:200].replace("\n", " ").replace("\t", " "))
    sys.stdout.flush()
    emit("done")


def main():
    job_path, result_fd = sys.argv[1], int(sys.argv[2])
    with open(job_path) as f:
        job = json.load(f)
    os.unlink(job_path)
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, 1 << 16)
    secret, workdir = job["secret"], os.path.realpath(job["workdir"])
    net = _lockdown(job)
    emit_raw = os.write

    def emit(*fields):
        emit_raw(result_fd, ("\t".join([secret, *map(str, fields)]) + "\n").encode())

    emit("start", net, os.getuid())
    if job["mode"] in ("prep", "judge"):
        _trusted(job, emit)
    elif job["mode"] == "check":
        _check(job, emit)
    else:
        _candidate(job, emit, secret, result_fd, workdir)


if __name__ == "__main__":
    main()
