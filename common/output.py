"""Files Ratchet writes at a path a person named: ``report --out``, ``export --out`` (a file or a folder), a model
export, ``init``'s config. One module, so every one of them is written and refused the same way.

Written: through ``ratchet.common.files.atomic_path``: a random temporary in a fresh 0700 folder beside the
target, created with ``O_EXCL | O_NOFOLLOW``, then one rename onto the target. No predictable name is ever
opened, so a link another user planted in a shared folder (at an old ``.NAME.tmp`` name or at the target itself)
is never followed; a link at the target is replaced, its target left alone.

Refused, also with ``--force`` (each refusal names the path and why, as :class:`OutputRefused`):

- anything inside a store: its reader catalog, its ``.wal``, anything under its ``<name>.store`` folder, or any
  DuckDB or SQLite database file (a legacy store, Prefect's database);
- anything inside a run dir (a folder holding a campaign folder: ``<campaign>/config.json`` beside
  ``eval_set.json`` or ``round-<n>/``; or a ``checkpoints`` folder of checkpoints) or a checkpoint folder (one
  holding ``ratchet_manifest.json``), and the run dirs a caller names (``protected``);
- anything under ``$RATCHET_HOME`` (default ``~/.cache/ratchet``: models, caches, Prefect's database) or
  ``$PREFECT_HOME``;
- an existing target unless ``force`` (a folder is never replaced), and an existing target that is not a regular
  file or a link.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ratchet.common.files import atomic_path, write_new_file

# Names Ratchet's own folders carry (written by ratchet.store.catalog, ratchet.loop.checkpoints and
# ratchet.loop.campaign.round_context; tests/common/test_output.py checks they still match those modules).
STORE_SUFFIX, WRITER_FILE = ".store", "writer.duckdb"
CHECKPOINT_MANIFEST = "ratchet_manifest.json"
CAMPAIGN_CONFIG, PINNED_EVAL_FILE = "config.json", "eval_set.json"
# A database file is recognised by its header, whatever its name.
_DB_MAGIC = {(8, b"DUCK"): "a DuckDB database (a store)", (0, b"SQLite format 3\x00"): "an SQLite database"}
# A folder with more entries than this is not searched for campaign folders (no run dir has that many campaigns).
MAX_SCANNED_ENTRIES = 10_000


class OutputRefused(ValueError):
    """An output path Ratchet will not write; the message names the path, why, and what to do instead."""


def ratchet_home() -> Path:
    """``$RATCHET_HOME`` or ``~/.cache/ratchet`` (the same rule as ``ratchet.loop.checkpoints.ratchet_home``)."""
    return Path(os.environ.get("RATCHET_HOME", Path.home() / ".cache" / "ratchet")).expanduser()


def _db_kind(p: Path) -> str | None:
    """What database ``p`` is, by its header (None: not a regular file, not a database, or unreadable)."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a link is not followed, a FIFO never blocks
    except OSError:
        return None
    try:
        head = os.read(fd, 32) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        head = b""
    finally:
        os.close(fd)
    return next((kind for (at, magic), kind in _DB_MAGIC.items() if head[at : at + len(magic)] == magic), None)


def _is_campaign_dir(d: Path) -> bool:
    if not (d / CAMPAIGN_CONFIG).is_file():
        return False
    return (d / PINNED_EVAL_FILE).is_file() or any(c.name.startswith("round-") and c.is_dir() for c in _entries(d))


def _is_checkpoint_dir(d: Path) -> bool:
    return (d / CHECKPOINT_MANIFEST).is_file()


def _entries(d: Path) -> list[Path]:
    try:
        with os.scandir(d) as it:
            out = []
            for e in it:
                if len(out) >= MAX_SCANNED_ENTRIES:
                    break
                if e.is_dir(follow_symlinks=False):
                    out.append(Path(e.path))
            return out
    except OSError:
        return []


def _is_run_dir(d: Path) -> bool:
    if (d / "checkpoints").is_dir() and any(_is_checkpoint_dir(c) for c in _entries(d / "checkpoints")):
        return True
    return any(_is_campaign_dir(c) for c in _entries(d))


def _under(p: Path, root: Path) -> bool:
    try:
        return p == root or p.is_relative_to(root.resolve())
    except OSError:
        return False


def protected_reason(target: Path, protected: Iterable[str | Path] = ()) -> str | None:
    """Why Ratchet must never write ``target`` (an absolute path whose folder is resolved), or None.

    Args:
        target: where the rename would land: ``out.parent.resolve() / out.name``.
        protected: more run dirs a caller knows of (e.g. ``<db>.runs``), refused with everything under them.
    """
    name = target.name
    base = name[: -len(".wal")] if name.endswith(".wal") else name
    if (target.parent / f"{base}{STORE_SUFFIX}" / WRITER_FILE).exists():
        part = "its WAL" if base != name else "the store itself: its reader catalog"
        return f"it is inside the store {target.with_name(base)} ({part})"
    for a in (target, *target.parents):
        if a.name.endswith(STORE_SUFFIX) and (a / WRITER_FILE).exists():
            return f"it is inside the store {a.with_name(a.name[: -len(STORE_SUFFIX)])} (under its folder {a})"
    kind = _db_kind(target)
    if kind is None and name.endswith(".wal") and target.with_name(base).exists():
        kind = _db_kind(target.with_name(base)) and "the WAL of a database file"
    if kind:
        return f"it is {kind}; Ratchet never replaces one"
    for root, what in [(ratchet_home(), "$RATCHET_HOME"), *[(Path(h), "$PREFECT_HOME") for h in _prefect_home()]]:
        if _under(target, root):
            return f"it is under {what} ({root}: models, caches, Prefect's database)"
    for root in protected:
        if _under(target, Path(root)):
            return f"it is inside the run dir {Path(root)}"
    for a in target.parents:
        if _is_checkpoint_dir(a):
            return f"it is inside the checkpoint folder {a}"
        if _is_campaign_dir(a):
            return f"it is inside the campaign folder {a} of a run dir"
        if _is_run_dir(a):
            return f"it is inside the run dir {a}"
    if target.is_dir() and not target.is_symlink() and (_is_checkpoint_dir(target) or _is_run_dir(target)):
        return "it is a checkpoint folder or a run dir"
    return None


def _prefect_home() -> list[str]:
    return [h for h in [os.environ.get("PREFECT_HOME")] if h]


def check_output(
    out: str | Path,
    *,
    force: bool = False,
    folder: bool = False,
    protected: Iterable[str | Path] = (),
    option: str = "--out",
) -> Path:
    """Refuse an output path that would replace part of a store, a run dir, a checkpoint, ``$RATCHET_HOME``, or an
    existing file (unless ``force``; a folder output never replaces anything).

    Args:
        option: how the messages name ``out`` (the command's option, e.g. ``--path``).
    Returns:
        ``out`` as given, when it may be written.
    Raises:
        OutputRefused: the message names ``out`` and why (``force`` never lifts a protected path).
    """
    out = Path(out)
    target = out.absolute().parent.resolve() / out.name
    if out.name in ("", ".", ".."):
        raise OutputRefused(f"{option} {out} names no file; pass a file path such as report.html")
    why = protected_reason(target, protected)
    if why:
        raise OutputRefused(f"{option} {out} is refused: {why}; write to a path outside it (--force never allows this)")
    if not os.path.lexists(target):
        return out
    if target.is_symlink():
        if folder or not force:
            raise OutputRefused(
                f"{option} {out} exists (a symbolic link to {os.readlink(target)}); Ratchet never writes through a link: "
                + ("choose a new path" if folder else "pass --force to replace the link itself, or choose a new path")
            )
        return out
    if folder:
        raise OutputRefused(f"{option} {out} exists; a folder is never replaced: choose a new path")
    if not target.is_file():
        raise OutputRefused(f"{option} {out} exists and is not a regular file; pass a new file path")
    if not force:
        raise OutputRefused(f"{option} {out} exists; pass --force to replace it, or choose a new path")
    return out


@contextmanager
def output_path(
    out: str | Path,
    *,
    force: bool = False,
    folder: bool = False,
    protected: Iterable[str | Path] = (),
    option: str = "--out",
) -> Iterator[Path]:
    """Check ``out`` (:func:`check_output`), yield a private temporary path to write it at (a file, or a folder when
    ``folder``), and rename it onto ``out`` on a clean exit; on an error nothing is left behind.

    Raises:
        OutputRefused: as :func:`check_output`, also when ``out`` appears while the temporary is written.
    """
    how = {"force": force, "folder": folder, "protected": list(protected), "option": option}
    check_output(out, **how)
    with atomic_path(out) as tmp:
        yield tmp
        check_output(out, **how)  # again just before the rename: what appeared there meanwhile is refused, never followed


def write_output(
    out: str | Path,
    data: bytes | str,
    *,
    force: bool = False,
    protected: Iterable[str | Path] = (),
    option: str = "--out",
    mode: int = 0o666,
) -> Path:
    """Write ``data`` (``str``: UTF-8) to the file ``out`` (checked, then a private temporary and a rename); returns ``out``."""
    blob = data.encode("utf-8") if isinstance(data, str) else data
    with output_path(out, force=force, protected=protected, option=option) as tmp:
        write_new_file(tmp, blob, mode)
    return Path(out)
