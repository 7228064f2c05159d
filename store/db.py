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

from ratchet.store.catalog import (
    adopt_legacy_store,
    catalog_is_current,
    publish,
    store_dir,
    tables_dir,
    write_catalog,
    writer_path,
)
from ratchet.store.locked import READ_ONLY_CONFIG, lock_down
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
    path = refuse_inside_a_store(path)
    target = writer_path(path)
    if read_only and not target.exists():
        if not path.exists():
            raise StoreError(f"no store at {path}; run `ratchet demo --db {path}` or pass the right --db PATH")
        target = path  # a store from before the reader catalog, or another DuckDB file (require_store says so)
    if not read_only:
        _check_writable(path)
        _adopt(path)
        target.parent.mkdir(parents=True, exist_ok=True)
    yield from _open(target, store_dir(path), read_only=read_only, timeout_s=timeout_s, config=config)


def refuse_inside_a_store(path: str | Path) -> Path:
    """``path`` as a ``Path``, unless it lies inside a store's folder (``<db>.store/writer.duckdb``, a snapshot):
    opened as a store there, the writer file would be taken for a legacy store and moved away.

    Raises:
        StoreError: it does; the message names the store to pass instead.
    """
    path = Path(path)
    for folder in path.absolute().parents:
        if folder.name.endswith(".store") and (folder / "writer.duckdb").exists():
            db = folder.with_name(folder.name.removesuffix(".store"))
            raise StoreError(f"--db {path} is inside the folder {folder} of the store {db}; pass --db {db}")
    return path


def _adopt(path: Path) -> None:
    try:
        adopt_legacy_store(path)
    except ValueError as e:
        raise StoreError(str(e)) from None
    except duckdb.Error as e:
        raise StoreError(f"cannot open {path} as a DuckDB store ({e}); pass a different --db PATH") from None


def _open(path: Path, allowed: Path, *, read_only: bool, timeout_s: float, config: dict | None):
    """Generator body of :func:`connect`: open ``path`` (retrying lock conflicts), lock it down to the files under
    ``allowed`` (the store's folder: its snapshots, the writer's temporary files), check it, yield it, close it."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only, config={**READ_ONLY_CONFIG, **(config or {})})
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
        lock_down(con, allowed)
        _distrust(con, path)
        yield con
    finally:
        con.close()


def _distrust(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Treat the store file as untrusted input (issue 22, class 6; issue 36, class 5): never run SQL stored in it.

    Ratchet writes no macros, so a file holding one (which would shadow a function, ``lower`` say, in
    every query) is refused; so is a file where a schema table is not a base table (a view in its place would
    run its SQL on every query of that table); the canned views are rebuilt from the schema as temporary views,
    which shadow whatever view SQL the file holds.

    Raises:
        StoreError: the file holds macros, or a schema table that is not a base table.
    """
    try:
        macros = [
            r[0] for r in con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE NOT internal").fetchall()
        ]
    except duckdb.Error:
        return  # not a DuckDB catalog we can list: require_store refuses it
    if macros:
        raise StoreError(
            f"{path} holds macro(s) {', '.join(sorted(macros)[:5])}, which Ratchet never writes: the store was changed outside "
            "Ratchet; restore it from a copy you trust (or DROP MACRO them yourself after reading them)"
        )
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()}
    others = {
        r[0]: r[1]
        for r in con.execute(
            "SELECT view_name, 'a view' FROM duckdb_views() WHERE NOT internal AND NOT temporary "
            "UNION ALL SELECT sequence_name, 'a sequence' FROM duckdb_sequences() WHERE NOT temporary"
        ).fetchall()
    }
    if bad := sorted(t.__tablename__ for t in TABLES if t.__tablename__ in others and t.__tablename__ not in have):
        raise StoreError(
            f"{path} is refused: its schema table {bad[0]} is {others[bad[0]]}, not a base table (Ratchet never writes "
            "that; its SQL would run on Ratchet's connection); the store was changed outside Ratchet: restore it from a "
            "copy you trust"
        )
    if "campaigns" not in have:
        return
    for name, sql in VIEWS.items():
        try:
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
        except (duckdb.CatalogException, duckdb.BinderException):
            continue  # a store older than a table this view reads: migrations add it; Ratchet never reads the view first


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


# `ratchet sql` classifies the user's statement with DuckDB's own parser (``duckdb.extract_statements`` and
# ``duckdb.tokenize``) against an allow-list of what reads (issue 22, class 4). Enumerated from
# ``duckdb.StatementType``: SELECT (also WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, UNPIVOT and PIVOT ... IN)
# reads; EXPLAIN reads only when what it explains is itself a SELECT (EXPLAIN ANALYZE executes it); PRAGMA
# only for the named read pragmas below (IMPORT DATABASE parses as a PRAGMA). Every other kind is refused:
# INSERT, UPDATE, DELETE, MERGE_INTO, CREATE, CREATE_FUNC, DROP, ALTER, COPY, COPY_DATABASE, EXPORT, ATTACH,
# DETACH, LOAD (INSTALL/LOAD), SET (SET, RESET, USE, PRAGMA x = y), VARIABLE_SET, CALL (CHECKPOINT, CALL f()),
# TRANSACTION, PREPARE, EXECUTE, VACUUM (VACUUM, ANALYZE), MULTI (a PIVOT without IN, which creates types),
# EXTENSION, and the kinds the parser never yields (INVALID, RELATION, LOGICAL_PLAN; ANALYZE parses as VACUUM,
# SET VARIABLE as SET, COPY FROM DATABASE as a PRAGMA, CREATE FUNCTION as CREATE: each refused as that kind).
READ_STATEMENT_TYPES = frozenset({"SELECT", "EXPLAIN", "PRAGMA"})
READ_PRAGMAS = frozenset(
    {
        "table_info",
        "show",
        "show_tables",
        "show_tables_expanded",
        "show_databases",
        "database_list",
        "database_size",
        "storage_info",
        "metadata_info",
        "version",
        "platform",
        "functions",
        "collations",
        "user_agent",
    }
)
DEFAULT_QUERY_TIMEOUT_S = 60.0
_HINT = (
    "`ratchet sql` is read-only and runs one query (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info)"
)


class QueryRefused(StoreError):
    """The SQL is not exactly one read-only query, or it ran past its timeout; the message says what to change."""


def _tokens(sql: str) -> list[tuple[str, str]]:
    """``(token type, text)`` of ``sql`` from DuckDB's tokenizer (comments dropped)."""
    toks = duckdb.tokenize(sql)
    out = []
    for i, (start, kind) in enumerate(toks):
        end = toks[i + 1][0] if i + 1 < len(toks) else len(sql)
        out.append((kind.name, sql[start:end].strip()))
    return out


def _explained(sql: str) -> str:
    """What an ``EXPLAIN [ANALYZE] [(options)]`` statement explains (the text after its prefix)."""
    toks = duckdb.tokenize(sql)
    i = 1  # toks[0] is EXPLAIN
    texts = _tokens(sql)
    if i < len(toks) and texts[i][1].upper() == "ANALYZE":
        i += 1
    if i < len(toks) and texts[i][1].startswith("("):
        depth = 0
        while i < len(toks):
            depth += texts[i][1].count("(") - texts[i][1].count(")")
            i += 1
            if depth <= 0:
                break
    return sql[toks[i][0] :] if i < len(toks) else ""


def _classify(sql: str, depth: int = 0) -> None:
    """Raise QueryRefused unless ``sql`` is one statement of a read kind (see :data:`READ_STATEMENT_TYPES`)."""
    stmts = duckdb.extract_statements(sql)
    if not stmts:
        raise QueryRefused('the query is empty; pass one SQL statement, e.g. "SELECT * FROM round_summary"')
    if len(stmts) > 1:
        raise QueryRefused(f"{len(stmts)} statements given; `ratchet sql` runs exactly one per call (run them one by one)")
    kind = stmts[0].type.name
    if kind == "SELECT":
        return
    if kind == "EXPLAIN" and depth == 0:
        inner = _explained(stmts[0].query)
        if not inner.strip():
            raise QueryRefused(f"EXPLAIN of nothing; {_HINT}")
        try:
            _classify(inner, depth + 1)
        except QueryRefused:
            raise QueryRefused(f"EXPLAIN of a statement that is not a query is refused; {_HINT}") from None
        return
    if kind == "PRAGMA":
        toks = _tokens(stmts[0].query)
        name = toks[1][1].lower() if len(toks) > 1 and toks[0][1].upper() == "PRAGMA" else ""
        if name in READ_PRAGMAS and not any(t[1] == "=" for t in toks):  # IMPORT DATABASE, COPY FROM DATABASE: no
            return
        raise QueryRefused(f"PRAGMA {name or '?'} is refused (only read pragmas: {', '.join(sorted(READ_PRAGMAS))}); {_HINT}")
    if kind == "MULTI":
        raise QueryRefused(
            f"PIVOT without an IN list is refused (it creates types); name the values: PIVOT t ON c IN (...); {_HINT}"
        )
    raise QueryRefused(f"{kind} statements are refused; {_HINT}; to export rows use --format csv|json")


def one_query(sql: str) -> str:
    """The single read-only statement of ``sql`` (trailing ``;`` allowed), classified by DuckDB's parser.

    Raises:
        QueryRefused: ``sql`` is empty, holds several statements, or one whose kind is not a read (COPY,
            EXPLAIN ANALYZE of a write, IMPORT/EXPORT DATABASE, ATTACH, INSTALL/LOAD, SET, CREATE, ...);
            duckdb.ParserException: it does not parse.
    """
    _classify(sql)
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

    The statement must pass :func:`one_query`. It runs on an in-memory DuckDB connection holding the
    reader views rebuilt from the schema over the store's Parquet snapshots where the store is now (the
    SQL stored in the catalog file is never executed, and a copied or moved store answers the same
    queries), opened with :data:`READ_ONLY_CONFIG` and locked down (no file access outside the snapshot
    folder). It opens no store file, so it never holds a lock a writer needs. The statement is
    interrupted (``con.interrupt()`` from a timer thread) after ``timeout_s`` seconds.
    ``lock_timeout_s``: kept for callers; no lock is taken.

    Raises:
        QueryRefused: as :func:`one_query`, or the query ran past ``timeout_s``.
        StoreError: there is no store at ``path``. duckdb.Error: the SQL itself is invalid or refused by DuckDB
            (e.g. ``PermissionException`` for a file outside the store).
    """
    from ratchet.store.catalog import catalog_statements

    one_query(sql)
    path = refuse_inside_a_store(path)
    if not path.exists():
        raise StoreError(f"no store at {path}; run `ratchet demo --db {path}` or pass the right --db PATH")
    if not tables_dir(path).is_dir():
        raise StoreError(
            f"{path} has no snapshot folder {tables_dir(path)}: not a Ratchet store, or one an older Ratchet wrote "
            "directly (run `ratchet run` on it once to convert it); pass the --db of a Ratchet store"
        )
    con = duckdb.connect(":memory:", config=READ_ONLY_CONFIG)
    try:
        for stmt in catalog_statements(path, absolute=True):
            try:
                con.execute(stmt)
            except (duckdb.IOException, duckdb.CatalogException, duckdb.BinderException):
                continue  # a table without snapshots yet (a store being created): its view is simply absent
        lock_down(con, tables_dir(path))
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
    finally:
        con.close()


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
