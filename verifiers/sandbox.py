"""Run one sandboxed Python job (``verifiers/_code_harness.py``) and collect its output safely.

Layers, outermost first (each holds even if the inner ones are bypassed):
    * a fresh temporary work dir per run, removed afterwards;
    * when running as root, a fresh unprivileged uid per run (so RLIMIT_NPROC is enforced, the
      program cannot touch root-owned files, and every process it leaves behind can be found
      by uid and killed), no supplementary groups;
    * a private network namespace (no interfaces but a down loopback) where the kernel allows;
    * rlimits: CPU seconds, address space, process count, file size, open files, no core dumps;
    * a wall-clock timeout that SIGKILLs the whole process group and then every process of the
      run's uid (children that called ``setsid`` escape the group, not the uid sweep);
    * stdout/stderr/record caps: read incrementally, the run is killed when a cap is exceeded.
No ``preexec_fn`` (unsafe with threads): the harness locks itself down after ``exec``.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ratchet.common.procs import kill_tree

HARNESS = str(Path(__file__).with_name("_code_harness.py"))
UID_BASE = 200_000  # per-run uids 200000..249999: not in /etc/passwd, owned by nobody else
_uid_counter = itertools.count(secrets.randbelow(50_000))
_uid_lock = threading.Lock()


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed run.

    Attributes:
        timeout_s: wall-clock limit, seconds; the process group is SIGKILLed after it.
        cpu_s: RLIMIT_CPU, seconds (defaults to ceil(timeout_s) + 1).
        memory_bytes: RLIMIT_AS; 1 GiB fits CPython plus ordinary solutions.
        nproc: RLIMIT_NPROC for the run's uid; the harness itself counts as one.
        file_bytes: RLIMIT_FSIZE: largest file the program may write.
        nofile: RLIMIT_NOFILE.
        stdout_bytes / stderr_bytes: capture caps; exceeding one kills the run (violation).
    """

    timeout_s: float = 5.0
    cpu_s: int | None = None
    memory_bytes: int = 1024**3
    nproc: int = 8
    file_bytes: int = 16 * 1024**2
    nofile: int = 64
    stdout_bytes: int = 1024**2
    stderr_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s ({self.timeout_s}) must be > 0 seconds; use e.g. 5.0")
        if self.nproc < 1:
            raise ValueError(f"nproc ({self.nproc}) must be >= 1 (the harness itself is a process)")


@dataclass
class RunResult:
    """What came back from one run. ``records`` hold only lines that carried the run's secret."""

    records: list[list[str]] = field(default_factory=list)
    stdout: bytes = b""
    stderr: bytes = b""
    returncode: int | None = None
    timed_out: bool = False
    output_exceeded: bool = False
    forged_records: int = 0
    wall_s: float = 0.0


def _world_readable(path: str) -> bool:
    """Whether every directory above ``path`` is traversable by others (an unprivileged uid can read it)."""
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [*p.parents][::-1]) and bool(os.stat(p).st_mode & 0o004)


def sandbox_python() -> str:
    """The interpreter for sandboxed runs.

    ``RATCHET_SANDBOX_PYTHON`` if set; else this interpreter when its standard library is readable
    by an unprivileged uid; else ``/usr/bin/python3`` (e.g. a pyenv Python under a 0700 ``/root``
    cannot import anything after the harness drops to its uid).
    """
    env = os.environ.get("RATCHET_SANDBOX_PYTHON")
    if env:
        return env
    if os.geteuid() != 0:
        return sys.executable
    import sysconfig

    if _world_readable(sysconfig.get_paths()["stdlib"]) and _world_readable(os.path.realpath(sys.executable)):
        return sys.executable
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand) and _world_readable(os.path.realpath(cand)):
            return cand
    raise RuntimeError(
        f"no Python readable by an unprivileged uid: {sys.executable}'s standard library is not; "
        f"set RATCHET_SANDBOX_PYTHON to a world-readable python3 (e.g. /usr/bin/python3)"
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


def run_job(job: dict, limits: Limits, stdin: bytes = b"") -> RunResult:
    """Run the harness on ``job`` (see ``_code_harness.main``) inside the sandbox.

    Args:
        job: JSON-able dict with ``mode`` and mode-specific fields; ``secret``, ``workdir``,
            ``limits`` and ``uid`` are filled in here.
        limits: resource limits.
        stdin: bytes given to the program's standard input.

    Returns:
        A ``RunResult``; never raises for anything the program does.
    """
    secret = secrets.token_hex(16)
    uid = _next_uid()
    workdir = tempfile.mkdtemp(prefix="ratchet-sbx-")
    nproc = limits.nproc if uid is not None else _own_process_count() + limits.nproc
    cpu_s = limits.cpu_s or int(limits.timeout_s) + 1
    full = {
        **job,
        "secret": secret,
        "workdir": workdir,
        "uid": uid,
        "limits": {
            "cpu_s": cpu_s,
            "memory_bytes": limits.memory_bytes,
            "nproc": nproc,
            "file_bytes": limits.file_bytes,
            "nofile": limits.nofile,
        },
    }
    job_path = os.path.join(workdir, ".job.json")
    with open(os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        json.dump(full, f)
    stdin_path = os.path.join(workdir, ".stdin")
    with open(os.open(stdin_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
        f.write(stdin)
    if uid is not None:
        os.chown(workdir, uid, uid)
    os.chmod(workdir, 0o700)
    res = RunResult()
    rfd, wfd = os.pipe()
    t0 = time.monotonic()
    try:
        with open(stdin_path, "rb") as stdin_f:
            os.unlink(stdin_path)
            proc = subprocess.Popen(
                [sandbox_python(), "-I", "-B", HARNESS, job_path, str(wfd)],
                stdin=stdin_f,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                start_new_session=True,
                pass_fds=(wfd,),
                env={"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir},
            )
        os.close(wfd)
        wfd = -1
        _collect(proc, rfd, secret, limits, res, t0)
    finally:
        if wfd >= 0:
            os.close(wfd)
        os.close(rfd)
        if uid is not None:
            kill_uid(uid)
        shutil.rmtree(workdir, ignore_errors=True)
    res.wall_s = time.monotonic() - t0
    return res


def _collect(proc: subprocess.Popen, rfd: int, secret: str, limits: Limits, res: RunResult, t0: float) -> None:
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    caps = {out_fd: limits.stdout_bytes, err_fd: limits.stderr_bytes, rfd: 4 * 1024**2}
    bufs = {fd: bytearray() for fd in caps}
    sel = selectors.DefaultSelector()
    for fd in caps:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    deadline = t0 + limits.timeout_s
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                res.timed_out = proc.poll() is None
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
