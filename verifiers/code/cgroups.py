"""One memory and process budget for a sandbox's whole process tree: a cgroup per run, where one can be had.

A cgroup counts every page its processes charge (anonymous memory, memfd and shared-memory pages, the tmpfs work
dir, pipe buffers), whichever process holds them and whether or not it is mapped; RLIMIT_AS counts only one process's
address space. Where one can be had:

* **cgroup v2** (a delegated subtree, e.g. a systemd unit with ``Delegate=yes``, or ``RATCHET_SANDBOX_CGROUP``
  naming a writable cgroup whose ``cgroup.subtree_control`` holds ``memory`` and ``pids``): a child per run with
  ``memory.max``, ``memory.swap.max = 0`` and ``pids.max``;
* **cgroup v1** (as root, or with write access to the daemon's own memory cgroup): a child of the daemon's memory
  cgroup with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``), and of its pids cgroup with ``pids.max``.

Otherwise (an ordinary user without a delegated cgroup, a container without cgroup access) there is none, and the
budget is the rlimit split plus the seccomp filter (``ratchet.verifiers.code.seccomp``), which refuses the calls
whose pages no rlimit bounds; :func:`cgroup_problem` says why, once, in the log. The run's first process joins its
cgroup before it starts bwrap (it waits on a pipe until the parent has moved it), so no process of the tree escapes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
PREFIX = "ratchet-sbx-"
_ROOT = Path("/sys/fs/cgroup")


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of the cgroup mounts, from /proc/self/mountinfo."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], rest[0], set(rest[2].split(","))))
    return out


def _own(controller: str | None) -> str | None:
    """This process's cgroup path in the v1 hierarchy of ``controller`` (None: the v2 one), from /proc/self/cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        if (controller is None and ctrls == "") or (controller is not None and controller in ctrls.split(",")):
            return path
    return None


def _writable(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


@functools.cache
def _parents() -> tuple[str, tuple[Path, ...]] | str:
    """(``"v2"`` or ``"v1"``, the folders to make each run's cgroup in), or why there are none (one clause)."""
    mounts = _mounts()
    v2 = next((m for m, t, _ in mounts if t == "cgroup2"), None)
    env = os.environ.get("RATCHET_SANDBOX_CGROUP")
    v2_cands = [Path(env)] if env else []
    if v2 is not None and _own(None) is not None:
        v2_cands.append(Path(v2) / _own(None).lstrip("/"))  # type: ignore[union-attr]
    for d in v2_cands:
        try:
            ctrl = set((d / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        if {"memory", "pids"} <= ctrl and _writable(d):
            return "v2", (d,)
    v1: list[Path] = []
    for ctrl in ("memory", "pids"):
        mount, own = next((m for m, t, o in mounts if t == "cgroup" and ctrl in o), None), _own(ctrl)
        if mount is None or own is None:
            break
        d = Path(mount) / own.lstrip("/")
        if not _writable(d):
            break
        v1.append(d)
    if len(v1) == 2:
        return "v1", tuple(v1)
    if env:
        return f"RATCHET_SANDBOX_CGROUP={env} is not a writable cgroup v2 folder with memory and pids in its subtree_control"
    if v2 is not None and v2_cands:
        return "the cgroup v2 hierarchy has no writable subtree with the memory and pids controllers delegated to this user"
    return "no writable cgroup v1 memory and pids hierarchy (an ordinary user gets none without delegation)"


def cgroup_problem() -> str | None:
    """Why sandboxes run without a cgroup here (one clause), or None when each run gets one."""
    got = _parents()
    return got if isinstance(got, str) else None


_warned: list[bool] = [False]


@dataclass
class Cgroup:
    """One run's cgroup (one folder for v2; a memory and a pids folder for v1)."""

    kind: str
    dirs: tuple[Path, ...]

    def add(self, pid: int) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for the memory budget."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        try:
            fields = dict(line.split() for line in (self.dirs[0] / name).read_text().splitlines() if " " in line)
        except (OSError, ValueError):
            return False
        return int(fields.get("oom_kill", "0")) > 0 or (self.kind == "v1" and fields.get("under_oom") == "1")

    def remove(self) -> None:
        """Kill whatever is left in the run's cgroup and remove it."""
        for d in self.dirs:
            for _ in range(100):
                try:
                    pids = (d / "cgroup.procs").read_text().split()
                except OSError:
                    break
                for p in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                        os.kill(int(p), 9)
                with contextlib.suppress(OSError):
                    d.rmdir()
                    break
                time.sleep(0.01)


def make_cgroup(memory_bytes: int, pids: int) -> Cgroup | None:
    """A new cgroup holding at most ``memory_bytes`` of memory (swap included) and ``pids`` processes; None where
    none can be had (logged once with the reason; the rlimits and the seccomp filter are then the budget)."""
    got = _parents()
    if isinstance(got, str):
        if not _warned[0]:
            _warned[0] = True
            log.info("code sandbox without a cgroup (%s): memory is bounded by rlimits and the seccomp filter", got)
        return None
    kind, parents = got
    name = PREFIX + secrets.token_hex(6)
    dirs = tuple(p / name for p in parents)
    made: list[Path] = []
    try:
        for d in dirs:
            d.mkdir(mode=0o755)
            made.append(d)
        if kind == "v2":
            (dirs[0] / "memory.max").write_text(str(memory_bytes))
            if (dirs[0] / "memory.swap.max").exists():
                (dirs[0] / "memory.swap.max").write_text("0")
            (dirs[0] / "pids.max").write_text(str(pids))
        else:
            (dirs[0] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            if (dirs[0] / "memory.memsw.limit_in_bytes").exists():
                (dirs[0] / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (dirs[1] / "pids.max").write_text(str(pids))
    except OSError as exc:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        log.warning(
            "cannot set up the sandbox's %s cgroup under %s (%s): this run is bounded by rlimits and seccomp",
            kind,
            parents[0],
            exc,
        )
        return None
    return Cgroup(kind, dirs)
