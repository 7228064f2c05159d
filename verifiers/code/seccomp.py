"""The sandbox's seccomp filter (bubblewrap's ``--seccomp FD``): refuse the system calls whose pages no rlimit bounds.

A page written to a ``memfd`` or a System V shared-memory segment lives in no address space once it is unmapped, so
RLIMIT_AS does not count it (issue 36, class 2: one sandbox held ~900 MiB of memfd pages beside a 256 MiB budget).
The filter makes ``memfd_create``, ``memfd_secret``, ``shmget`` and ``msgget`` (System V message queues: up to
``msgmni`` x ``msgmnb`` bytes held by no process) fail with ``EPERM``; every other call is allowed.
POSIX shared memory (``shm_open``) needs a writable ``/dev/shm``, which the sandbox does not have, and the work dir is a
tmpfs of ``Limits.disk_bytes``. System calls of another ABI (i386 ``int 0x80``, x32) are refused too, so the same
calls cannot come in under other numbers. The filter is classic BPF, built here (no libseccomp needed).
"""

from __future__ import annotations

import errno
import platform
import struct

# machine -> (AUDIT_ARCH_*, {system call: number}, first number of a foreign ABI on that arch or None)
_ARCHES: dict[str, tuple[int, dict[str, int], int | None]] = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "msgget": 68}, 0x40000000),  # x32 above
    "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "msgget": 186}, None),
}
REFUSED = ("memfd_create", "memfd_secret", "shmget", "msgget")

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ...|BPF_JGE, BPF_RET
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO
_NR, _ARCH = 0, 4  # offsets of seccomp_data.nr and .arch


def filter_program(machine: str | None = None) -> bytes | None:
    """The filter as ``struct sock_filter[]`` bytes for bwrap's ``--seccomp``; None on a machine not listed above.

    Layout: check the ABI (another one: ``EPERM``), load the call number, refuse the listed numbers (and, on x86_64,
    every x32 number), allow the rest.
    """
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, numbers, foreign = arch
    checks = [(_JGE_K, foreign)] if foreign is not None else []
    checks += [(_JEQ_K, numbers[name]) for name in REFUSED]
    n = len(checks)
    deny = _ERRNO | errno.EPERM
    prog = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ_K, 1, 0, audit_arch), (_RET_K, 0, 0, deny), (_LD_W_ABS, 0, 0, _NR)]
    for i, (op, k) in enumerate(checks):
        prog.append((op, n - i, 0, k))  # true: jump over the remaining checks and the allow, to the deny
    prog += [(_RET_K, 0, 0, _ALLOW), (_RET_K, 0, 0, deny)]
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)
