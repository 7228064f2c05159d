"""Child side of the code sandbox. Run as ``python -I -B _code_harness.py JOBFILE RESULT_FD``.

Standalone on purpose (stdlib only, no ``verifiers`` import): it starts as root (or the caller's
user), reads its job, locks itself down, and only then runs untrusted code:

1. read the job file (JSON) and delete it, so the program never sees the secret or the job;
2. leave the network namespace (``unshare(CLONE_NEWNET)``; as non-root with a user namespace);
3. set resource limits (CPU s, address space, process count, file size, open files, no core);
4. when root, drop to the job's unprivileged uid/gid (Linux ignores RLIMIT_NPROC for root);
5. install an audit hook (PEP 578) that turns process creation, signals, sockets, ctypes and file
   access outside the work dir into a ``violation`` record and an immediate ``os._exit``;
6. run the job and write tab-separated records ``<secret>\\t...`` to RESULT_FD.

Records never carry a verdict: for ``assert`` jobs they carry canonical serializations of the
*probe* values (the candidate-dependent parts of each assert); the parent holds the expected
values and decides. Values must be plain builtins (checked with ``type(v) is T``, never ``==``
or ``isinstance``), so objects with an always-true ``__eq__`` cannot pass.
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
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    net = "none"
    if job.get("no_network", True):
        if os.geteuid() == 0 and libc.unshare(CLONE_NEWNET) == 0:
            net = "netns"
        elif os.geteuid() != 0 and libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            net = "userns+netns"
    lim = job["limits"]
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


def make_codec(candidate_classes):
    """Strict serializer of plain builtins -> JSON-able tagged lists (no candidate code is called)."""
    t, hexf, frepr = type, int.__format__, float.__repr__
    items, keys = dict.items, list

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
        if k in (list, tuple, set, frozenset):
            return [k.__name__, [enc(x, budget) for x in keys(v)]]
        if k is dict:
            return ["dict", [[enc(a, budget), enc(b, budget)] for a, b in items(v)]]
        raise TypeError(f"value of type {k.__name__} is not a plain builtin (int/float/str/list/tuple/dict/set/...)")

    def dec(x):
        tag = x[0]
        if tag == "none":
            return None
        if tag == "bool":
            return bool(x[1])
        if tag == "int":
            return int(x[1], 16)
        if tag == "float":
            return float(x[1])
        if tag == "str":
            return x[1]
        if tag == "complex":
            return complex(float(x[1]), float(x[2]))
        if tag == "bytes":
            return bytes.fromhex(x[1])
        if tag == "dict":
            return {dec(a): dec(b) for a, b in x[1]}
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](dec(y) for y in x[1])

    def roundtrip(v):
        return dec(enc(v, [1_000_000]))

    def guard(v):
        """Candidate values as seen by test code: plain copies, guarded callables, proxied instances."""
        if callable(v):

            def call(*a, **kw):
                return guard(v(*a, **kw))

            return call
        if t(v) in candidate_classes:
            return _Proxy(v, guard)
        return roundtrip(v)

    return enc, dec, guard


class _Proxy:
    """Wraps an instance of a candidate class: attribute reads are guarded, nothing else is allowed."""

    __slots__ = ("_obj", "_guard")

    def __init__(self, obj, guard):
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_guard", guard)

    def __getattr__(self, name):
        return object.__getattribute__(self, "_guard")(getattr(object.__getattribute__(self, "_obj"), name))


def main():
    job_path, result_fd = sys.argv[1], int(sys.argv[2])
    with open(job_path) as f:
        job = json.load(f)
    os.unlink(job_path)
    secret, workdir = job["secret"], os.path.realpath(job["workdir"])
    net = _lockdown(job)
    emit_raw = os.write

    def emit(*fields):
        emit_raw(result_fd, ("\t".join([secret, *map(str, fields)]) + "\n").encode())

    emit("start", net, os.getuid())
    import builtins
    import traceback

    pristine = dict(vars(builtins))
    read_roots = sorted(
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
    mode = job["mode"]
    enc, dec, _ = make_codec(set())
    if mode == "judge":  # trusted test code only: evaluate asserts with the probe values substituted
        ns = {"__builtins__": pristine, "__p": [dec(v) if v is not None else None for v in job["values"]]}
        for stmt in job["setup"]:
            exec(compile(stmt, "<setup>", "exec"), ns)
        for i, expr in enumerate(job["exprs"]):
            try:
                emit("judged", i, bool(eval(compile(expr, "<test>", "eval"), ns)))
            except Exception as exc:  # a test that raises is a failed test; recorded, not hidden
                emit("judged_error", i, type(exc).__name__)
        emit("done")
        return
    if job.get("audit", True):
        _install_hook(secret, result_fd, workdir, read_roots)
    g = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "<candidate>", "exec"), g)
        emit("loaded")
    except SystemExit as exc:
        emit("loaded" if exc.code in (None, 0) else "exit", repr(exc.code)[:100])
    except MemoryError:
        emit("load_error", "MemoryError")
    except BaseException as exc:  # the candidate's crash is data for the verdict
        emit("load_error", type(exc).__name__, traceback.format_exc(limit=3)[-300:].replace("\n", " | "))
    if mode == "stdio":
        sys.stdout.flush()
        emit("done")
        return
    classes = {v for v in g.values() if type(v) is type and getattr(v, "__module__", None) == "__main__"}
    enc, dec, guard = make_codec(classes)
    names = set(job["candidate_names"])
    ns = {}
    for k, v in g.items():
        try:
            ns[k] = guard(v) if k in names else v
        except (TypeError, ValueError) as exc:  # e.g. a module bound by assignment: tests cannot see it
            emit("unguarded", k, type(exc).__name__)
    ns["__builtins__"] = pristine
    for stmt in job["setup"]:
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


if __name__ == "__main__":
    main()
