"""How every DuckDB connection Ratchet opens on a store is locked down (issue 22, class 4; issue 36, class 5).

SQL stored in a store's files is someone else's input: a view planted in place of a table, or the user's own
query in ``ratchet sql``, must reach the store's files and nothing else.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

# Every connection Ratchet opens on a store (``connect``: the writer file; ``ratchet sql``'s in-memory views) has
# these settings and then ``lock_down``'s: the writer's may read and write only under the store's folder, the
# user's SQL (``ratchet sql``) only read the snapshot folder. So SQL stored in someone else's store, or typed by
# the user, can reach the store and nothing else: no file reads or writes outside the store's
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


def lock_down(con: duckdb.DuckDBPyConnection, allowed: Path, *relative: str) -> None:
    """No file access beyond ``allowed`` (the store's own folder), and no setting changed afterwards.

    ``relative``: the same folder as the connection's own SQL names it relative to ``file_search_path`` (DuckDB
    checks the name as written, before it resolves it; ``..`` is refused in either form).
    """
    con.execute("SET allowed_directories = ?", [[str(allowed.resolve()) + "/", *(r.rstrip("/") + "/" for r in relative)]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
