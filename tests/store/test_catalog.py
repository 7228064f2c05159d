"""The reader catalog: a read-only connection held on --db never blocks a write and sees each commit."""

import duckdb
import pytest

from ratchet.store.catalog import store_dir, writer_path
from ratchet.store.db import StoreError, init_db, query, transaction
from ratchet.store.ingest import insert_rows


def _prompt(i):
    return dict(prompt_id=f"p{i}", source="s", task="t", question=f"q{i}", answer="1", split="train")


def test_held_reader_never_blocks_writes_and_sees_each_commit(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    init_db(db)
    monkeypatch.chdir(tmp_path)  # the catalog's views name paths relative to the store's folder
    reader = duckdb.connect(str(db), read_only=True)  # a notebook left open on the store
    try:
        for i in range(3):
            with transaction(db, timeout_s=5) as con:  # would wait for the lock, then fail, on a shared file
                insert_rows(con, "prompts", [_prompt(i)])
            assert reader.execute("SELECT count(*) FROM prompts").fetchone() == (i + 1,)
        init_db(db)  # a new campaign start while the reader holds the catalog
        assert reader.execute("SELECT count(*) FROM round_summary").fetchone() == (0,)
    finally:
        reader.close()
    assert query(db, "SELECT count(*) FROM prompts")[1] == [(3,)]


def test_old_store_is_moved_behind_a_catalog(tmp_path):
    db = tmp_path / "old.duckdb"
    init_db(db)
    with transaction(db) as con:
        insert_rows(con, "prompts", [_prompt(1)])
    # Make it look like a store an older Ratchet wrote directly at --db.
    db.unlink()
    writer_path(db).rename(tmp_path / "legacy.duckdb")
    import shutil

    shutil.rmtree(store_dir(db))
    (tmp_path / "legacy.duckdb").rename(db)
    init_db(db)
    assert writer_path(db).exists()
    assert query(db, "SELECT prompt_id FROM prompts")[1] == [("p1",)]
    with duckdb.connect(str(db), read_only=True) as con:  # --db now holds views only
        assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchone() == (0,)


def test_foreign_duckdb_file_is_refused(tmp_path):
    db = tmp_path / "other.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE keep (x INT)")
    with pytest.raises(StoreError, match="not a Ratchet store"):
        init_db(db)


def test_an_empty_table_is_published_once_and_never_taken_for_a_foreign_file(tmp_path, caplog):
    db = tmp_path / "s.duckdb"
    init_db(db)  # every table empty: each is published as one empty row-range file
    empty = store_dir(db) / "tables" / "prompts" / "rows-000000000000-000000000000.parquet"
    before = empty.stat().st_ino
    with caplog.at_level("WARNING", logger="ratchet.store.catalog"):
        with transaction(db) as con:  # a later publish, with prompts still empty
            insert_rows(con, "rounds", [])
        init_db(db)
    assert "not written by Ratchet" not in caplog.text
    assert empty.stat().st_ino == before  # not replaced under a reader that listed it
    assert query(db, "SELECT count(*) FROM prompts")[1] == [(0,)]


def test_a_version_stays_for_a_while_after_it_is_superseded(tmp_path):
    """Its own age does not count: a query that listed an old version a moment ago is still reading it."""
    import os
    import time

    from ratchet.store.catalog import KEEP_VERSIONS_S, _prune

    old, new, newest = (tmp_path / f"v-{i:012d}.parquet" for i in (1, 2, 3))
    long_ago = time.time() - 10 * KEEP_VERSIONS_S
    for f in (old, new):
        f.write_bytes(b"x")
        os.utime(f, (long_ago, long_ago))
    newest.write_bytes(b"x")  # supersedes `new` just now
    _prune([old, new, newest])
    assert not old.exists()  # superseded (by `new`) long ago
    assert new.exists() and newest.exists()  # `new` was superseded just now; the newest always stays
