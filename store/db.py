"""Connections to the DuckDB store: short-lived, retried on lock conflicts.

DuckDB lets one process hold a file read-write, and while it does any other process (even a
read-only one) fails with "Could not set lock on file". Ratchet's own connections therefore go to
the writer file (:func:`ratchet.store.catalog.writer_path`) and never keep it open: every write (a
stage's ingest, a gate decision) opens it, does its work in one transaction, publishes the changed
tables to Parquet, and closes it; lock conflicts between Ratchet's processes are retried with backoff.
People (and ``ratchet sql``) open ``--db``, the reader catalog of views over those Parquet snapshots
(:mod:`ratchet.store.catalog`), which the writer never needs: a reader may hold it for hours.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
from sqlalchemy.schema import CreateTable

from ratchet.store.catalog import adopt_legacy_store, catalog_is_current, publish, tables_dir, write_catalog, writer_path
from ratchet.store.schema import TABLES, VIEWS

logger = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store cannot be opened or used; the message says why and how to fix it."""


def _is_lock_error(e: Exception) -> bool:
    msg = str(e)
    return "lock" in msg.lower() and ("Could not set lock" in msg or "Conflicting lock" in msg or "being used by another" in msg)


@contextmanager
def connect(
    path: str | Path, *, read_only: bool = False, timeout_s: float = 120.0, config: dict | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the store's writer file (``path`` is the ``--db`` path), retrying lock conflicts with jittered
    backoff for up to ``timeout_s`` seconds.

    For Ratchet's own short-lived reads and writes; a store written directly at ``path`` by an older
    Ratchet is moved to the writer path first (read-write) or read in place (read-only).
    ``config``: DuckDB settings applied when the database opens.

    Raises:
        StoreError: the file is still locked after ``timeout_s``, is not a DuckDB file, its
            directory is not writable, or (read-only) it does not exist.
    """
    path = Path(path)
    target = writer_path(path)
    if read_only and not target.exists():
        if not path.exists():
            raise StoreError(f"no store at {path}; run `ratchet demo --db {path}` or pass the right --db PATH")
        target = path  # a store from before the reader catalog, or another DuckDB file (require_store says so)
    if not read_only:
        _check_writable(path)
        _adopt(path)
        target.parent.mkdir(parents=True, exist_ok=True)
    yield from _open(target, read_only=read_only, timeout_s=timeout_s, config=config)


def _adopt(path: Path) -> None:
    try:
        adopt_legacy_store(path)
    except ValueError as e:
        raise StoreError(str(e)) from None
    except duckdb.Error as e:
        raise StoreError(f"cannot open {path} as a DuckDB store ({e}); pass a different --db PATH") from None


def _open(path: Path, *, read_only: bool, timeout_s: float, config: dict | None):
    """Generator body of :func:`connect`: open ``path`` (retrying lock conflicts), yield it, close it."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config=config or {})
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
    """``ALTER TABLE ... ADD COLUMN`` for every schema column an existing store lacks, and ``ALTER COLUMN ... DROP
    NOT NULL`` for every column the schema now allows to be NULL (e.g. ``checkpoints.path`` of unsaved policies).

    Columns added after a store was created must be nullable; older rows read NULL for them.
    """
    from duckdb_engine import Dialect

    dialect = Dialect()
    out = []
    for t in TABLES:
        have = dict(
            con.execute(
                "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_name = ?", [t.__tablename__]
            ).fetchall()
        )
        for col in t.__table__.columns:
            if have and col.name not in have:
                out.append(f"ALTER TABLE {t.__tablename__} ADD COLUMN {col.name} {col.type.compile(dialect=dialect)}")
            elif have.get(col.name) == "NO" and col.nullable and not col.primary_key:
                out.append(f"ALTER TABLE {t.__tablename__} ALTER COLUMN {col.name} DROP NOT NULL")
    return out


def require_store(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Raise StoreError unless the open file is a Ratchet store (it has the ``campaigns`` table)."""
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "campaigns" not in tables:
        what = f"a DuckDB file with other tables ({', '.join(sorted(tables)[:5])})" if tables else "an empty DuckDB file"
        raise StoreError(f"{path} is {what}, not a Ratchet store; pass the --db of a Ratchet store (or a new path)")


def init_db(path: str | Path) -> None:
    """Create the schema if absent, add columns a store made by an older Ratchet lacks, publish the
    tables and (re)build the reader catalog at ``path`` when its views changed (idempotent).

    Raises StoreError as ``connect`` does.
    """
    path = Path(path)
    with connect(path) as con:
        if con.execute("SELECT count(*) FROM information_schema.tables").fetchone()[0]:
            require_store(con, path)  # never write our schema into someone else's database
        con.execute("BEGIN")
        changes = migrations(con)
        for stmt in changes + ddl_statements():
            con.execute(stmt)
        con.execute("COMMIT")
        publish(con, path, force=bool(changes))
    if not catalog_is_current(path):
        write_catalog(path)


# The user's SQL (``ratchet sql``) runs on a read-only connection to the reader catalog with these
# settings, so it can read the store and nothing else: no file reads or writes outside the store's
# snapshot folder (COPY ... TO, EXPORT, ATTACH, read_csv of other files), no extension installs or loads
# from disk, no secrets, and no setting can be changed afterwards (SET, RESET, PRAGMA enable_*).
# ``allowed_directories`` can only be set once the database runs, so the last three are SET in order.
READ_ONLY_CONFIG: dict[str, bool] = {
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_persistent_secrets": False,
}


def _lock_down(con: duckdb.DuckDBPyConnection, db: Path) -> None:
    allowed = str(tables_dir(db).resolve()) + "/"
    con.execute("SET allowed_directories = ?", [[allowed]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


# Statement kinds that only read: SELECT covers WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE; MULTI is PIVOT.
QUERY_KINDS = ("SELECT", "EXPLAIN", "PRAGMA", "MULTI")
DEFAULT_QUERY_TIMEOUT_S = 60.0


class QueryRefused(StoreError):
    """The SQL is not exactly one read-only query, or it ran past its timeout; the message says what to change."""


def one_query(sql: str) -> str:
    """The single read-only statement of ``sql`` (trailing ``;`` allowed).

    Raises:
        QueryRefused: ``sql`` is empty, holds several statements, or one that is not a query (COPY,
            ATTACH, INSTALL, SET, CREATE, ...); duckdb.ParserException: it does not parse.
    """
    stmts = duckdb.extract_statements(sql)
    if not stmts:
        raise QueryRefused('the query is empty; pass one SQL statement, e.g. "SELECT * FROM round_summary"')
    if len(stmts) > 1:
        raise QueryRefused(f"{len(stmts)} statements given; `ratchet sql` runs exactly one per call (run them one by one)")
    kind = stmts[0].type.name
    if kind not in QUERY_KINDS:
        raise QueryRefused(
            f"{kind} statements are refused: `ratchet sql` is read-only and runs queries only "
            "(SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info); to export rows use --format csv|json"
        )
    return sql


def query(
    path: str | Path,
    sql: str,
    params: list | None = None,
    *,
    timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
    lock_timeout_s: float = 120.0,
):
    """Run one read-only query on the store (the user's SQL) and return ``(column names, rows)``.

    The connection is read-only, to the reader catalog ``path`` (never the writer file, so a slow query
    cannot delay a round), opened with :data:`READ_ONLY_CONFIG` and locked down; the statement is
    interrupted (``con.interrupt()`` from a timer thread) after ``timeout_s`` seconds, so a slow or
    hung reader never holds the file's lock longer than that. ``lock_timeout_s``: how long to wait
    for a writer to let go of the file first.

    Raises:
        QueryRefused: as :func:`one_query`, or the query ran past ``timeout_s``.
        StoreError: the store cannot be opened. duckdb.Error: the SQL itself is invalid or refused by DuckDB
            (e.g. ``PermissionException`` for a file outside the store).
    """
    one_query(sql)
    path = Path(path)
    if not path.exists():
        raise StoreError(f"no store at {path}; run `ratchet demo --db {path}` or pass the right --db PATH")
    with contextmanager(_open)(path, read_only=True, timeout_s=lock_timeout_s, config=READ_ONLY_CONFIG) as con:
        _lock_down(con, path)
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            cur = con.execute(sql, params or [])
            if cur is None or cur.description is None:
                return [], []
            return [d[0] for d in cur.description], cur.fetchall()
        except duckdb.InterruptException:
            raise QueryRefused(
                f"the query ran past its {timeout_s:g} s timeout and was stopped; narrow it (WHERE, LIMIT) or pass a larger --timeout-s"
            ) from None
        finally:
            timer.cancel()


@contextmanager
def transaction(path: str | Path, *, timeout_s: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection inside one transaction: committed on success, rolled back on error.

    A process killed inside it loses only this transaction (DuckDB's WAL), never earlier ones. After
    the commit the changed tables are published to the reader catalog's Parquet snapshots; a failed
    publish is logged and retried by the next transaction (the rows are committed either way).
    """
    with connect(path, timeout_s=timeout_s) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            yield con
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        try:
            publish(con, path)
        except (OSError, duckdb.Error) as e:
            logger.warning("could not publish the store's tables for readers (%s); the next write retries", e)
