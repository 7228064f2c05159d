"""The reader catalog: the ``--db`` file a person opens is never the file the rounds write.

DuckDB lets one process hold a file read-write, and a read-only holder (a DuckDB shell or a
notebook left open on the store) blocks every writer. So the store is two parts:

- the **writer file** ``<db>.store/writer.duckdb``: Ratchet's own connections (ingest, gate, status),
  always short and retried on lock conflicts (:mod:`ratchet.store.db`). Nobody else opens it.
- the **reader catalog** ``<db>``: a DuckDB file holding only views, one per table over its Parquet
  files under ``<db>.store/tables/<table>/``, plus the canned views (``round_summary``, ...).

After every committed write transaction the writer publishes what changed as *new* files (never
rewriting one in place: DuckDB opens a file at bind and again at scan, so a replaced file fails the
query of a reader racing it). Insert-only tables get a file per new row range; the others a new full
version when their content hash changed, and their view keeps the newest version among the files a
query listed. A view lists its files on every query, so a connection held open for hours sees each
completed round without reconnecting, and it never takes a lock the writer needs. Tables are
published children first (trajectories before rounds), so a round that reads ``completed`` has its
rows visible. The catalog itself is rebuilt (new file, renamed over ``<db>``) only when its views
change; a reader holding the old one keeps its inode, whose views name the same folders.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

from ratchet.common.files import atomic_path, atomic_write_text
from ratchet.store.locked import READ_ONLY_CONFIG, lock_down
from ratchet.store.schema import TABLES, VIEWS

logger = logging.getLogger(__name__)

# A file Ratchet only inspects (is it a current catalog? a legacy store?): it lists the catalog, reads no file.
METADATA_ONLY = {**READ_ONLY_CONFIG, "enable_external_access": False}

# Insert-only tables (``INSERT OR IGNORE``): re-exported only when their row count changed. The others
# are small and updated in place (a round's status, a checkpoint's ``deleted_at``): exported every time.
APPEND_ONLY = frozenset({"prompts", "trajectories", "verdicts", "training_examples", "evaluations"})
# Children before parents: a reader that sees a round (or a gate decision) also sees the rows it names.
_PUBLISH_ORDER = ["prompts", "trajectories", "verdicts", "training_examples", "evaluations", "checkpoints", "training_runs"]


def store_dir(db: str | Path) -> Path:
    """The folder beside ``db`` that holds the writer file and the Parquet snapshots."""
    db = Path(db)
    return db.with_name(db.name + ".store")


def writer_path(db: str | Path) -> Path:
    """The DuckDB file Ratchet writes (nobody else opens it)."""
    return store_dir(db) / "writer.duckdb"


def tables_dir(db: str | Path) -> Path:
    """Folder of the per-table Parquet snapshots the reader catalog's views read."""
    return store_dir(db) / "tables"


def _table_names() -> list[str]:
    names = [t.__tablename__ for t in TABLES]
    first = [n for n in _PUBLISH_ORDER if n in names]
    return first + [n for n in names if n not in first]


def _sql_str(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


# ``rows-<from>-<to>.parquet``: a publish's new rows; ``rows-<from>-<to>-<active>.parquet``: a merged file
# (:func:`compact`), read from epoch second ``<active>`` on, when every file it covers stops being read.
_RX = r"rows-(\d{12})-(\d{12})(-(\d{12}))?\.parquet"  # groups 1, 2 and 4 (Python here, DuckDB's RE2 in the views)
_ROWS = re.compile(_RX)
_ROWS_GLOBBED = re.compile(r"rows-\d{12}-\d{12}.*\.parquet", re.DOTALL)  # what the views' glob lists
_VERSION = re.compile(r"v-(\d{12})\.parquet")
_DIGITS = "[0-9]" * 12  # the views' globs list only names shaped like the writer's (a planted ``rows-x.parquet`` is not read)
_warned: set[Path] = set()


def _foreign(f: Path) -> None:
    """Log (once per file and process) a file in the snapshot folder that Ratchet did not write; it is ignored."""
    if f not in _warned:
        _warned.add(f)
        logger.warning("ignoring %s in the store's snapshot folder: not written by Ratchet (remove it)", f)


def _quarantine(f: Path, why: str) -> None:
    """Move a well-named snapshot file Ratchet did not write out of the views' globs (``.foreign-<name>``), and say so."""
    aside = f.with_name(f".foreign-{f.name}")
    try:
        f.rename(aside)
    except OSError as e:
        raise OSError(f"cannot move {f} aside ({e.strerror}); it was not written by Ratchet ({why}): remove it") from None
    logger.warning("moved %s aside to %s: not written by Ratchet (%s); readers no longer see it", f, aside.name, why)


def _snapshot_files(folder: Path, append_only: bool, recorded: list[str] | None, rows: int | None) -> list[tuple[tuple, Path]]:
    """The snapshot files of a table that Ratchet wrote, ``((numbers...), path)`` in numeric order, oldest first.

    Insert-only tables have ``rows-<from>-<to>.parquet`` (``rows-<n>-<n>.parquet``: the empty file an empty table is
    published as, so its view has a file to read); the others ``v-<n>.parquet``. The numbers are compared as numbers.
    A name Ratchet never gives is ignored and logged (moved aside when the views' glob lists it). A well-formed name
    that is not in the writer's record (``recorded``, from ``published.json``; None for a store from before the record,
    or whose record is unreadable: then any merged name), or a row range beyond the table's ``rows``, was planted: it is moved aside (:func:`_quarantine`), so readers stop
    seeing it at the next publish and the writer never numbers its files after it.
    """
    pattern, glob = (_ROWS, "rows-*.parquet") if append_only else (_VERSION, "v-*.parquet")
    out = []
    for f in folder.glob(glob):
        m = pattern.fullmatch(f.name)
        if not m:
            if append_only and _ROWS_GLOBBED.fullmatch(f.name):  # the view's glob lists it (its rows are never read)
                _quarantine(f, "its name is not one Ratchet gives")
            else:
                _foreign(f)
            continue
        numbers = tuple(int(g) for g in ((m[1], m[2], m[4]) if append_only else (m[1],)) if g is not None)
        if recorded is not None and f.name not in recorded:
            _quarantine(f, "its name is not in the store's record of the files it published")
        elif recorded is None and len(numbers) == 3:  # Ratchet merges only in a store that records its files
            _quarantine(f, "a merged file in a store with no record of the files it published")
        elif append_only and not numbers[0] <= numbers[1] <= (rows or 0):
            _quarantine(f, f"rows {numbers[0]}..{numbers[1]} of a table that has {rows}")
        else:
            out.append((numbers, f))
    return sorted(out)


def _read_record(db: str | Path) -> tuple[Path, dict, dict | None]:
    """``published.json``'s path, its content (``{}`` when missing or unreadable) and its record of the files
    published per table (None: a store from before the record, or an unreadable one)."""
    path = store_dir(db) / "published.json"
    try:
        state = json.loads(path.read_text()) if path.exists() else {}
    except json.JSONDecodeError:
        state = {}
    state = state if isinstance(state, dict) else {}
    return path, state, state.get(FILES_KEY) if isinstance(state.get(FILES_KEY), dict) else None


def _gaps(ranges: list[tuple[tuple, Path]], rows: int) -> list[tuple[int, int]]:
    """The row ranges of ``0 <= rowid < rows`` that no file of ``ranges`` holds (normally one: the new rows)."""
    gaps, pos = [], 0
    for nums, _ in sorted(ranges):
        if nums[0] > pos:
            gaps.append((pos, nums[0]))
        pos = max(pos, nums[1])
    return gaps + ([(pos, rows)] if rows > pos else [])


def _write(con: duckdb.DuckDBPyConnection, sql: str, target: Path) -> None:
    with atomic_path(target) as tmp:  # a new name: no reader ever had this path open
        con.execute(f"COPY ({sql}) TO {_sql_str(tmp)} (FORMAT parquet)")


def publish(con: duckdb.DuckDBPyConnection, db: str | Path, *, force: bool = False) -> list[str]:
    """Write what changed since the last publish as new, immutable Parquet files; returns the tables written.

    A file is never rewritten in place: DuckDB opens a file more than once per query (bind, then scan),
    so replacing one under a reader fails its query (measured: "Invalid data" on ~10% of queries racing
    a replace). Insert-only tables get a file per new row range (``rows-<from>-<to>.parquet``; rows are
    never deleted, so their rowids are stable); the other tables a full new version (``v-<n>.parquet``)
    when their content hash changed. ``force``: a new version of every such table (after a migration).
    A version superseded more than :data:`KEEP_VERSIONS_S` ago is removed (the newest always stays).

    ``con``: a read-write connection to the writer file, outside any open transaction (it holds the
    writer lock, so no two publishers race).
    """
    state_path, state, files = _read_record(db)
    written: dict[str, list[str]] = {}
    done = []
    for name in _table_names():
        folder = tables_dir(db) / name
        folder.mkdir(parents=True, exist_ok=True)
        recorded = None if files is None else files.get(name, [])
        if name in APPEND_ONLY:  # new rows only; a column added later reads NULL in older files, as in the table
            n = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
            ranges = _snapshot_files(folder, True, recorded, n)
            for lo, hi in _gaps(ranges, n) if ranges else [(0, n)]:  # new rows, or files lost or moved aside
                target = folder / f"rows-{_number(lo)}-{_number(hi)}.parquet"
                _write(con, f"SELECT * FROM {name} WHERE rowid >= {lo} AND rowid < {hi}", target)
                ranges.append(((lo, hi), target))
                done.append(name)
            written[name] = [f.name for _, f in _prune_covered(sorted(ranges))]
            continue
        digest = str(con.execute(f"SELECT count(*), bit_xor(hash(t)) FROM {name} t").fetchone())
        versions = _snapshot_files(folder, False, recorded, None)
        if force or state.get(name) != digest or not versions:
            gen = versions[-1][0][0] + 1 if versions else 1
            target = folder / f"v-{_number(gen)}.parquet"
            _write(con, f"SELECT * FROM {name}", target)
            versions.append(((gen,), target))
            state[name] = digest
            done.append(name)
        written[name] = [f.name for f in _prune([f for _, f in versions])]
    state[FILES_KEY] = written
    atomic_write_text(state_path, json.dumps(state, sort_keys=True))
    return done


FILES_KEY = "_files"  # published.json: the snapshot files the writer published, per table
_NUMBER_DIGITS = 12  # snapshot numbers are written zero-padded to this width (the views' globs); compared as numbers


def _number(n: int) -> str:
    """A snapshot number as the file names carry it (zero-padded to 12 digits).

    Raises:
        OverflowError: ``n`` needs more digits (10^12 publishes of one table: never, unless the files were forged).
    """
    if not 0 <= n < 10**_NUMBER_DIGITS:
        raise OverflowError(f"snapshot number {n} needs more than {_NUMBER_DIGITS} digits; the store's record was forged")
    return f"{n:0{_NUMBER_DIGITS}d}"


# A version stays this long after a newer one exists, for queries that listed it and have not read it yet.
KEEP_VERSIONS_S = 600.0


def _prune(versions: list[Path]) -> list[Path]:
    """Remove each version superseded more than :data:`KEEP_VERSIONS_S` ago (the newest always stays); returns those kept.

    A version is superseded when the next one is written, so its age is the next file's, not its own: a
    version written long ago and superseded a moment ago may still be listed by a query that is reading it.
    """
    now = time.time()
    kept = []
    for f, newer in zip(versions[:-1], versions[1:]):
        try:
            superseded_long_ago = now - newer.stat().st_mtime > KEEP_VERSIONS_S
        except FileNotFoundError:
            superseded_long_ago = False
        if superseded_long_ago:
            f.unlink(missing_ok=True)
        else:
            kept.append(f)
    return kept + versions[-1:]


def catalog_statements(db: str | Path, *, absolute: bool = False) -> list[str]:
    """The reader catalog's DDL, built from the schema: one view per table over its Parquet files, then the canned views.

    Insert-only tables: the union of their row-range files, less those a merged file read now covers
    (:func:`_rows_view`). Others: the newest version among the files
    the query listed (the largest version number in a file name), so a version written mid-query is simply not seen.
    The globs match only names the writer gives (12-digit numbers). Paths are relative to the folder holding ``db`` (``<db>.store/tables/...``), so the catalog file stays
    right when the store's folder is copied or moved (DuckDB resolves them from its working directory:
    open the catalog from that folder); ``absolute``: the store's current absolute paths (``ratchet sql``'s
    in-memory views).
    """
    tdir = tables_dir(db).resolve() if absolute else Path(store_dir(db).name) / "tables"
    stmts = []
    for name in _table_names():
        if name in APPEND_ONLY:
            stmts.append(f"CREATE OR REPLACE VIEW {name} AS {_rows_view(tdir / name)}")
        else:
            src = _sql_str(tdir / name / f"v-{_DIGITS}.parquet")
            version = r"CAST(regexp_extract(filename, 'v-([0-9]+)\.parquet$', 1) AS BIGINT)"  # a number, not a name
            stmts.append(
                f"CREATE OR REPLACE VIEW {name} AS SELECT * EXCLUDE (filename) FROM read_parquet({src}, "
                f"union_by_name = true, filename = true) QUALIFY {version} = max({version}) OVER ()"
            )
    return stmts + [f"CREATE OR REPLACE VIEW {name} AS {sql}" for name, sql in VIEWS.items()]


def write_catalog(db: str | Path) -> Path:
    """Build the reader catalog in a new file and rename it over ``db`` (readers holding the old one are unaffected).

    Needs every table's snapshot (call :func:`publish` first). Returns ``db``.
    """
    db = Path(db)
    with atomic_path(db) as tmp, duckdb.connect(str(tmp), config=READ_ONLY_CONFIG) as con:
        # The views name paths relative to the store's folder; they bind there now and wherever it is copied.
        con.execute("SET file_search_path = ?", [str(db.resolve().parent)])
        lock_down(con, tables_dir(db), f"{store_dir(db).name}/tables")
        for stmt in catalog_statements(db):
            con.execute(stmt)
    Path(str(db) + ".wal").unlink(missing_ok=True)  # a WAL left by an older, directly written store
    return db


def catalog_is_current(db: str | Path) -> bool:
    """True when ``db`` is a reader catalog with exactly the current views (no rebuild needed)."""
    db = Path(db)
    if not db.exists():
        return False
    want = {s.split(" AS ", 1)[0].split()[-1]: s.split(" AS ", 1)[1] for s in catalog_statements(db)}
    try:
        with duckdb.connect(str(db), read_only=True, config=METADATA_ONLY) as con:
            have = dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
            tables = con.execute("SELECT count(*) FROM duckdb_tables()").fetchone()[0]
    except duckdb.Error:
        return False  # locked by an odd writer or not a DuckDB file: rebuild by rename
    if tables or set(have) != set(want):
        return False
    return all(" ".join(want[k].split()) in " ".join(have[k].split()) for k in want)


def adopt_legacy_store(db: str | Path) -> bool:
    """Move a store written directly at ``db`` by an older Ratchet to the writer path; True when moved.

    An empty DuckDB file at ``db`` is left for :func:`write_catalog` to replace.

    Raises:
        ValueError: ``db`` is a DuckDB file holding other tables (not a Ratchet store), or a reader
            catalog whose writer file is missing.
    """
    db = Path(db)
    if writer_path(db).exists() or not db.exists():
        return False
    with duckdb.connect(str(db), read_only=True, config=METADATA_ONLY) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    if not tables and "campaigns" in views:
        raise ValueError(
            f"{db} is a reader catalog but its writer file {writer_path(db)} is missing; restore that folder or pass a new --db PATH"
        )
    if not tables:
        return False
    if "campaigns" not in tables:
        raise ValueError(
            f"{db} is a DuckDB file with other tables ({', '.join(sorted(tables)[:5])}), not a Ratchet store; "
            "pass the --db of a Ratchet store (or a new path)"
        )
    store_dir(db).mkdir(parents=True, exist_ok=True)
    wal = Path(str(db) + ".wal")
    if wal.exists():
        shutil.move(wal, str(writer_path(db)) + ".wal")
    shutil.move(db, writer_path(db))
    logger.info("moved the store %s to %s; %s is now its reader catalog", db, writer_path(db), db)
    return True


# Compaction (issue 41, item 4): a reader lists a table's files on every query, so its time grows with their
# number (measured: a count at 3,000 files is ~150x the one at 10). ``compact`` merges runs of row-range files
# into new files; the views stop reading the files a merged file covers once it is active, and the writer
# deletes them :data:`KEEP_VERSIONS_S` later (a query that listed them before may still be reading them).
COMPACT_DELAY_S = 60.0  # a merged file is read from this long after it is in place (the readers' clock skew; at least 1 s)
COMPACT_TARGET_BYTES = 256 * 2**20  # a merged file grows to about this size; files already that big stay as they are


def _rows_view(folder: Path) -> str:
    """The SELECT of an insert-only table's view over its files in ``folder``.

    It reads the ``rows-<from>-<to>[-<active>].parquet`` files the query lists and skips (a) a file that a merged
    file active by ``now()`` (the query's, or its transaction's, start) covers, (b) a merged file not active yet while a
    file it covers is still there, and (c) a merged file the query's ``glob`` of the folder did not list (it was renamed
    in between: not active yet). A merged file is renamed into place before its ``<active>`` second and the files it
    covers are deleted only :data:`KEEP_VERSIONS_S` after it, so both listings of one query agree on every file that
    decides, whichever comes first, and a transaction held open past the deletion reads the merged file by (b).
    """
    glob = _sql_str(folder / f"rows-{_DIGITS}-{_DIGITS}*.parquet")  # plain and merged names (others: moved aside)
    rx = _sql_str(_RX)
    files = (
        f"SELECT name, CAST(regexp_extract(name, {rx}, 1) AS BIGINT) AS a, CAST(regexp_extract(name, {rx}, 2) AS BIGINT) AS b, "
        f"TRY_CAST(regexp_extract(name, {rx}, 4) AS BIGINT) AS active "
        f"FROM (SELECT parse_filename(file) AS name FROM glob({glob})) WHERE regexp_full_match(name, {rx})"
    )
    skipped = (
        "SELECT f.name FROM files f JOIN files g ON g.active <= epoch(now()) AND g.a <= f.a AND g.b >= f.b "
        "AND (g.a < f.a OR g.b > f.b OR g.active > coalesce(f.active, -1)) "
        "UNION ALL SELECT g.name FROM files g JOIN files f ON g.active > epoch(now()) AND g.a <= f.a AND g.b >= f.b "
        "AND f.name <> g.name"
    )
    name = "parse_filename(filename)"
    return (
        f"WITH files AS MATERIALIZED ({files}), skipped AS ({skipped}) "  # one listing decides every rule
        f"SELECT * EXCLUDE (filename) FROM read_parquet({glob}, union_by_name = true, filename = true) "
        f"WHERE regexp_full_match({name}, {rx}) AND {name} NOT IN (SELECT name FROM skipped) "
        f"AND (regexp_extract({name}, {rx}, 4) = '' OR {name} IN (SELECT name FROM files))"
    )


def _covered(ranges: list[tuple[tuple, Path]], active_by: float) -> set[Path]:
    """The files of ``ranges`` (from :func:`_snapshot_files`) that a merged file active by ``active_by`` (epoch s)
    covers: the views' rule (b) in :func:`_rows_view`."""
    merged = [(nums, f) for nums, f in ranges if len(nums) == 3 and nums[2] <= active_by]
    out = set()
    for nums, f in ranges:
        a, b, act = nums[0], nums[1], nums[2] if len(nums) == 3 else -1
        if any(g[0] <= a and g[1] >= b and (g[0] < a or g[1] > b or g[2] > act) for g, h in merged if h != f):
            out.add(f)
    return out


def _prune_covered(ranges: list[tuple[tuple, Path]]) -> list[tuple[tuple, Path]]:
    """Delete the files a merged file has covered for more than :data:`KEEP_VERSIONS_S`; returns the others."""
    gone = _covered(ranges, time.time() - KEEP_VERSIONS_S)
    for f in gone:
        f.unlink(missing_ok=True)
    return [(nums, f) for nums, f in ranges if f not in gone]


def _runs(live: list[tuple[tuple, Path]], target_bytes: int) -> list[list[tuple[tuple, Path]]]:
    """Consecutive files of ``live`` grouped so each group stays within ``target_bytes``; only groups of 2+ files."""
    runs, run, size = [], [], 0
    for item in live:
        n = item[1].stat().st_size
        if run and size + n > target_bytes:
            runs.append(run)
            run, size = [], 0
        run.append(item)
        size += n
    runs.append(run)
    return [r for r in runs if len(r) > 1]


def compact(
    con: duckdb.DuckDBPyConnection,
    db: str | Path,
    *,
    min_files: int = 2,
    delay_s: float | None = None,
    target_bytes: int = COMPACT_TARGET_BYTES,
) -> dict[str, tuple[int, int]]:
    """Merge each insert-only table's row-range files into files of about ``target_bytes``; returns, per table
    merged, ``(files read before, files read after)`` once the merged files are active. A table whose views
    read fewer than ``min_files`` files is left as it is (the rounds' nightly default: ``retention.compact_after_files``).

    A merged file ``rows-<from>-<to>-<active>.parquet`` holds the writer's rows ``from <= rowid < to`` (the rows
    the files it covers hold) and is read from ``<active>`` = its rename time + ``delay_s`` (default
    :data:`COMPACT_DELAY_S`, at least 1 s) on (:func:`_rows_view`);
    the covered files are deleted by the first publish :data:`KEEP_VERSIONS_S` after that. Rows are never
    rewritten in place and no file a reader may have listed is touched, so queries racing a compaction neither
    fail nor count a row twice. ``con``: a read-write connection to the writer file (its lock keeps publishers out).
    """
    if not catalog_is_current(db):  # views from before merged files would stop reading the rows they cover
        write_catalog(db)
    state_path, state, files = _read_record(db)
    if files is None:
        publish(con, db)  # a store from before the record (or an unreadable one): write it first
        return compact(con, db, min_files=min_files, delay_s=delay_s, target_bytes=target_bytes)
    delay = max(COMPACT_DELAY_S if delay_s is None else delay_s, 1.0)
    out = {}
    for name in [n for n in _table_names() if n in APPEND_ONLY]:
        folder = tables_dir(db) / name
        n = con.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
        ranges = _snapshot_files(folder, True, files.get(name, []), n)
        pending = _covered(ranges, float("inf"))  # as the views will read them once every merged file is active
        live = [(nums, f) for nums, f in ranges if f not in pending]
        runs = _runs(live, target_bytes) if len(live) >= min_files else []
        for run in runs:
            a, b = run[0][0][0], run[-1][0][1]
            tmp_dir = Path(tempfile.mkdtemp(prefix=".merge.", suffix=".tmp", dir=folder))
            try:
                tmp = tmp_dir / "rows.parquet"
                con.execute(f"COPY (SELECT * FROM {name} WHERE rowid >= {a} AND rowid < {b}) TO {_sql_str(tmp)} (FORMAT parquet)")
                active = math.ceil(time.time() + delay)  # after the rename below, whatever the write took
                target = folder / f"rows-{_number(a)}-{_number(b)}-{_number(active)}.parquet"
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp_dir, ignore_errors=True)
            files[name] = sorted({*files.get(name, []), target.name})
            atomic_write_text(state_path, json.dumps({**state, FILES_KEY: files}, sort_keys=True))
        if runs:
            out[name] = (len(live), len(live) - sum(len(r) for r in runs) + len(runs))
    return out
