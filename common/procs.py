"""Process trees: is a process alive, and stop a child with everything it started (psutil).

A child that leads its own process group (``start_new_session=True``) is stopped with its group and
with every descendant found by walking the tree, so a grandchild that called ``setsid`` goes too.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Iterable

import psutil


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (dead, not yet reaped) counts as gone."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def signal_tree(pid: int, sig: int = signal.SIGKILL, *, group: bool = True) -> None:
    """Send ``sig`` to ``pid``'s descendants, its process group (when it leads one and ``group``) and ``pid``."""
    procs = _descendants(pid)
    if group:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for p in [*procs, psutil.Process(pid) if psutil.pid_exists(pid) else None]:
        if p is None:
            continue
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def kill_tree(proc: subprocess.Popen, *, grace_s: float = 0.0) -> None:
    """Stop ``proc`` with its process group and descendants, and reap it.

    ``grace_s`` > 0 sends SIGTERM first and SIGKILL to whatever still runs after that many seconds.
    """
    if grace_s > 0:
        signal_tree(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    signal_tree(proc.pid, signal.SIGKILL)
    proc.wait()


def stop_descendants(known: Iterable[psutil.Process] = (), spare_pgids: Iterable[int] = (), grace_s: float = 10.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s`` seconds, every process in ``known`` or below this one; returns their pids.

    ``known``: a snapshot taken when a stop began, so grandchildren that lost their parent (reparented to init) are
    still found. Processes in a group of ``spare_pgids`` (a server stopped separately) are left alone.
    """
    spare = set(spare_pgids)

    def doomed(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) not in spare
        except (psutil.NoSuchProcess, ProcessLookupError):
            return False

    procs = {p.pid: p for p in [*known, *_descendants(os.getpid())]}
    running = [p for p in procs.values() if doomed(p)]
    for p in running:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, still = psutil.wait_procs(running, timeout=grace_s)
    for p in still:
        try:
            logging.getLogger(__name__).warning(
                "process %d (%s) ignored SIGTERM for %.0f s: killing it", p.pid, " ".join(p.cmdline()[:3]), grace_s
            )
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(still, timeout=5)
    return [p.pid for p in running]
