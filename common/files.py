"""Atomic file and folder writes: a reader (or a resumed stage) never sees half a file.

Every writer goes through ``atomic_path``: the content is written to a temporary name in the same
folder and renamed over the target with ``os.replace`` (atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The process umask of each `[service] file_mode`: what Ratchet creates (store, run dir, $RATCHET_HOME, Prefect's
# database) is owner-only, or also group-readable (so engineers in the service's group can run `ratchet sql`).
FILE_MODES = {"private": 0o077, "group": 0o027}  # files 0600 / 0640, folders 0700 / 0750


def set_file_mode(mode: str) -> int:
    """Set the process umask for ``mode`` (a key of :data:`FILE_MODES`); returns the previous umask.

    Raises:
        ValueError: ``mode`` is not one of them (the message lists them).
    """
    if mode not in FILE_MODES:
        raise ValueError(f'file mode {mode!r} is not one of {", ".join(FILE_MODES)}; e.g. [service] file_mode = "private"')
    return os.umask(FILE_MODES[mode])


@contextmanager
def file_mode(mode: str) -> Iterator[None]:
    """Create files under ``mode``'s umask inside the block, then restore the umask the process had."""
    old = set_file_mode(mode)
    try:
        yield
    finally:
        os.umask(old)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit rename it to ``path``, on an error remove it.

    Works for files and folders (a folder replaces only a missing or empty target; see ``publish_dir``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(table, path: str | Path) -> Path:
    """Write a ``pyarrow.Table`` to ``path`` as Parquet, atomically; returns ``path``."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def publish_dir(tmp_dir: str | Path, final: str | Path) -> bool:
    """Move a fully written folder to ``final`` in one rename; returns False (and removes ``tmp_dir``)
    when ``final`` already exists (content-addressed folders: the same name means the same content)."""
    tmp_dir, final = Path(tmp_dir), Path(final)
    if final.exists():
        shutil.rmtree(tmp_dir, ignore_errors=True)
        return False
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp_dir, final)
    return True
