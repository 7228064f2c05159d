"""Atomic file and folder writes: a reader (or a resumed stage) never sees half a file.

Every writer goes through ``atomic_path``: the content is written to a random temporary in a private folder
made beside the target and renamed over the target with ``os.replace`` (atomic on POSIX within one filesystem).
Files written at a path a person named (``--out``) go through ``ratchet.common.output``, which also refuses
paths inside a store, a run dir, a checkpoint or ``$RATCHET_HOME``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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


# What a temporary's folder name keeps of the target's name (a file name may be 255 bytes; the folder adds to it).
_TMP_NAME_CHARS = 64


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path for ``path``; on a clean exit rename it onto ``path``, on an error remove it.

    The temporary is ``<folder of path>/.<name>.<random>.tmp/<name>``: a fresh folder from ``tempfile.mkdtemp``
    (a random name, created by ``mkdir``, which fails rather than follow anything already there; mode 0700), so
    no other user can plant a link at the name, swap the file or read it while it is written, even in a shared,
    world-writable folder. The rename replaces whatever is at ``path`` (a symbolic link there is replaced itself,
    its target never written) and is atomic on POSIX: a reader sees the old file or the new one.

    Works for files and folders (a folder replaces only a missing or empty target; see ``publish_dir``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{path.name[:_TMP_NAME_CHARS]}.", suffix=".tmp", dir=path.parent))
    tmp = tmp_dir / path.name
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)  # never follows a link inside


def write_new_file(path: str | Path, data: bytes, mode: int = 0o666) -> None:
    """Create ``path`` (``O_EXCL | O_NOFOLLOW``: never an existing file, never through a link) holding ``data``.

    ``mode`` is masked by the umask as usual (0o600: owner-only whatever the umask).
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int = 0o666) -> Path:
    """Write ``data`` to ``path`` atomically (a private temporary, then a rename; see ``atomic_path``); returns ``path``."""
    with atomic_path(path) as tmp:
        write_new_file(tmp, data, mode)
    return Path(path)


def atomic_write_text(path: str | Path, text: str, mode: int = 0o666) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


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
