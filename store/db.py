"""Connections to the DuckDB store: short-lived, retried on lock conflicts.

DuckDB lets one process hold a file read-write, and while it does any other process (even a
read-only one) fails with "Could not set lock on file". Ratchet therefore never keeps the file
open: every write (a stage's ingest, a gate decision) and every ``ratchet sql`` query opens the
file, does its work in one transaction, and closes it. Both sides retry a lock conflict with
backoff, so a query during a round waits at most for one ingest (well under a second) and neither
side fails or loses data.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from sqlalchemy.schema import CreateTable

from ratchet.store.schema import TABLES, VIEWS

logger = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says why and how to fix it."""


def _is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "lock" in msg.lower() and ("Could not set lock" in msg or "Conflicting lock" in msg or "being used by another" in msg)


@contextmanager
def connect(path: str | Path, *, read_only: bool = False, timeout_s: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the DuckDB file, retrying lock conflicts with jittered backoff for up to ``timeout_s``.

    Raises:
        StoreError: the file is still locked after ``timeout_s``, is not a DuckDB file, its
            directory is not writable, or (read-only) it does not exist.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"no store at {path}; run `ratchet demo --db {path}` or pass the right --db PATH")
    if not read_only:
        _check_writable(path)
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as e:
            if not _is_lock_error(e):
                raise StoreError(f"cannot open {path} as a DuckDB store ({e}); pass a different --db PATH") from e
            if time.monotonic() > deadline:
                raise StoreError(f"cannot open {path}: {e}; if another long-lived program holds it, close that program") from e
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 1.6, 0.5)
        except duckdb.Error as e:
            raise StoreError(f"cannot open {path} as a DuckDB store ({e}); pass a different --db PATH") from e
    try:
        yield con
    finally:
        con.close()


def _check_writable(path: Path) -> None:
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise StoreError(f"--db {path} is a directory; pass a file path such as {path / 'ratchet.duckdb'}")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(
                f"cannot create directory {parent} for the store ({e.strerror}); pass a writable --db PATH"
            ) from None
    probe = parent / f".ratchet-write-probe-{random.randrange(1 << 30)}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise StoreError(f"store directory {parent} is not writable ({e.strerror}); pass a writable --db PATH") from None


def ddl_statements() -> list[str]:
    """``CREATE TABLE IF NOT EXISTS`` for every SQLModel table, compiled for DuckDB, then the views."""
    from duckdb_engine import Dialect

    dialect = Dialect()
    stmts = [str(CreateTable(t.__table__, if_not_exists=True).compile(dialect=dialect)).strip() for t in TABLES]
    stmts += [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]
    return stmts


def migrations(con: duckdb.DuckDBPyConnection) -> list[str]:
    """``ALTER TABLE ... ADD COLUMN`` for every schema column an existing store lacks.

    Columns added after a store was created must be nullable; older rows read NULL for them.
    """
    from duckdb_engine import Dialect

    dialect = Dialect()
    out = []
    for t in TABLES:
        have = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [t.__tablename__]
            ).fetchall()
        }
        for col in t.__table__.columns:
            if have and col.name not in have:
                out.append(f"ALTER TABLE {t.__tablename__} ADD COLUMN {col.name} {col.type.compile(dialect=dialect)}")
    return out


def require_store(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Raise StoreError unless the open file is a Ratchet store (it has the ``campaigns`` table)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "campaigns" not in tables:
        what = f"a DuckDB file with other tables ({', '.join(sorted(tables)[:5])})" if tables else "an empty DuckDB file"
        raise StoreError(f"{path} is {what}, not a Ratchet store; pass the --db of a Ratchet store (or a new path)")


def init_db(path: str | Path) -> None:
    """Create the schema if absent and add columns a store made by an older Ratchet lacks (idempotent).

    Raises StoreError as ``connect`` does.
    """
    with connect(path) as con:
        if con.execute("SELECT count(*) FROM information_schema.tables").fetchone()[0]:
            require_store(con, path)  # never write our schema into someone else's database
        con.execute("BEGIN")
        for stmt in migrations(con) + ddl_statements():
            con.execute(stmt)
        con.execute("COMMIT")


def query(path: str | Path, sql: str, params: list | None = None, *, read_only: bool = True, timeout_s: float = 120.0):
    """Run one statement and return ``(column names, rows)``.

    Raises:
        StoreError: the store cannot be opened; duckdb.Error: the SQL itself is invalid.
    """
    with connect(path, read_only=read_only, timeout_s=timeout_s) as con:
        cur = con.execute(sql, params or [])
        if cur is None or cur.description is None:
            return [], []
        return [d[0] for d in cur.description], cur.fetchall()


@contextmanager
def transaction(path: str | Path, *, timeout_s: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection inside one transaction: committed on success, rolled back on error.

    A process killed inside it loses only this transaction (DuckDB's WAL), never earlier ones.
    """
    with connect(path, timeout_s=timeout_s) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
