"""Compaction (issue 41, item 4): each insert-only table's snapshot files merged into a few, while readers keep
querying: no row read twice or missed, before, during or after a merged file becomes active, and the covered
files deleted only once no query can still be reading them."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

import ratchet.store.catalog as catalog
from ratchet.flows.cli import app
from ratchet.store.catalog import compact, store_dir, tables_dir
from ratchet.store.db import connect, init_db, query, transaction
from ratchet.store.ingest import insert_rows

runner = CliRunner()


def _prompts(k: int, n: int = 5) -> list[dict]:
    return [
        dict(prompt_id=f"p{k}-{i}", source="s", task="t", question=f"q{k} {i}", answer=str(i), split="train") for i in range(n)
    ]


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "s.duckdb"
    init_db(path)
    for k in range(6):  # six publishes: six row-range files (and the empty one the table started with)
        with transaction(path) as con:
            insert_rows(con, "prompts", _prompts(k))
    monkeypatch.chdir(tmp_path)  # the catalog's views name paths relative to the store's folder
    return path


def _files(db: Path) -> list[str]:
    return sorted(f.name for f in (tables_dir(db) / "prompts").glob("rows-*.parquet"))


def _rows(reader: duckdb.DuckDBPyConnection) -> list[tuple]:
    return reader.execute("SELECT * FROM prompts ORDER BY prompt_id").fetchall()


def _wait_until_active(db: Path) -> None:
    active = max(int(n[:-8].split("-")[3]) for n in _files(db) if n.count("-") == 3)
    time.sleep(max(0.0, active - time.time()) + 0.05)


def test_a_held_reader_sees_every_row_once_before_and_after_a_merged_file_is_active(db: Path) -> None:
    reader = duckdb.connect(str(db), read_only=True)  # a notebook left open on the store
    try:
        before = _rows(reader)
        assert len(before) == 30
        with connect(db) as con:
            assert compact(con, db, delay_s=1.5) == {"prompts": (7, 1)}
        merged = [n for n in _files(db) if n.count("-") == 3]
        assert merged and merged[0].startswith("rows-000000000000-000000000030-"), _files(db)
        assert len(_files(db)) == 8  # the merged file beside the seven it covers: nothing deleted yet
        assert _rows(reader) == before  # not active yet: the covered files are read, the merged one is not
        _wait_until_active(db)
        assert _rows(reader) == before  # active: the merged file is read, the covered ones are not
        with transaction(db) as con:  # rows written after the compaction land in a new file and are read too
            insert_rows(con, "prompts", _prompts(9))
        assert len(_rows(reader)) == 35 and query(db, "SELECT count(DISTINCT prompt_id) FROM prompts")[1] == [(35,)]
    finally:
        reader.close()


def test_covered_files_are_deleted_only_keep_versions_s_after_the_merged_file_is_active(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(db) as con:
        compact(con, db, delay_s=0)
    _wait_until_active(db)
    with transaction(db) as con:  # a write within KEEP_VERSIONS_S: the covered files stay (a query may be reading them)
        insert_rows(con, "prompts", _prompts(7))
    assert len(_files(db)) == 9
    monkeypatch.setattr(catalog, "KEEP_VERSIONS_S", 0.0)
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(8))
    files = _files(db)
    assert len(files) == 3 and files[0].startswith("rows-000000000000-000000000030-"), files
    record = json.loads((store_dir(db) / "published.json").read_text())[catalog.FILES_KEY]["prompts"]
    assert sorted(record) == files  # the writer's record names exactly the files left
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM prompts")[1] == [(40, 40)]


def test_a_second_compaction_before_the_first_is_active_merges_nothing_twice(db: Path) -> None:
    with connect(db) as con:
        compact(con, db, delay_s=1)
        assert compact(con, db, delay_s=1) == {}  # the seven files are already merged, pending activation
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(7))
        insert_rows(con, "prompts", _prompts(8))
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(10))
    with connect(db) as con:
        assert compact(con, db, delay_s=1) == {"prompts": (3, 1)}  # the first merged file and the two new ones
    for _ in range(2):
        assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM prompts")[1] == [(45, 45)]
        _wait_until_active(db)


def test_readers_racing_a_compaction_across_its_activation_count_every_row_once(db: Path) -> None:
    counts: list[int] = []
    stop = threading.Event()

    def read() -> None:
        with duckdb.connect(str(db), read_only=True) as reader:
            while not stop.is_set():
                counts.append(reader.execute("SELECT count(*) FROM prompts").fetchone()[0])

    t = threading.Thread(target=read)
    t.start()
    try:
        with connect(db) as con:
            compact(con, db, delay_s=0.3)
        _wait_until_active(db)
        time.sleep(0.3)
    finally:
        stop.set()
        t.join()
    assert len(counts) > 10 and set(counts) == {30}, sorted(set(counts))


def test_a_table_under_min_files_is_left_alone_and_a_merge_stays_within_target_bytes(db: Path) -> None:
    with connect(db) as con:
        assert compact(con, db, min_files=8) == {}
        size = (tables_dir(db) / "prompts" / _files(db)[1]).stat().st_size
        assert compact(con, db, delay_s=0, target_bytes=int(size * 3.5))["prompts"][1] > 1
    _wait_until_active(db)
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM prompts")[1] == [(30, 30)]


def test_a_planted_merged_file_is_moved_aside(db: Path) -> None:
    real = tables_dir(db) / "prompts" / _files(db)[-1]
    planted = real.with_name(f"rows-{0:012d}-{30:012d}-{0:012d}.parquet")  # "active since 1970", covering every row
    planted.write_bytes(real.read_bytes())
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(7))
    assert not planted.exists() and planted.with_name(f".foreign-{planted.name}").exists()
    assert query(db, "SELECT count(DISTINCT prompt_id), count(*) FROM prompts")[1] == [(35, 35)]


def test_gc_compact_says_what_it_merged(db: Path) -> None:
    r = runner.invoke(app, ["gc", "--db", str(db), "--compact"])
    assert r.exit_code == 0, r.output
    assert "compacted prompts: 7 Parquet files to 1" in r.output
    r = runner.invoke(app, ["gc", "--db", str(db), "--compact"])
    assert r.exit_code == 0 and "compaction: every table is in one file or too few to merge" in r.output, r.output


def test_a_reader_in_a_transaction_opened_before_activation_still_reads_every_row_after_the_deletion(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its now() stays at its transaction's start, so the merged file is never active for it: once the covered files
    are gone, the merged file is read because nothing it covers is left (before: 5 of 30 rows)."""
    reader = duckdb.connect(str(db), read_only=True)
    try:
        reader.execute("BEGIN")
        assert _rows(reader) and len(_rows(reader)) == 30
        with connect(db) as con:
            compact(con, db, delay_s=0)
        _wait_until_active(db)
        monkeypatch.setattr(catalog, "KEEP_VERSIONS_S", 0.0)
        with transaction(db) as con:
            insert_rows(con, "prompts", _prompts(20))
        assert len(_files(db)) == 2  # the merged file and the new rows' file
        assert reader.execute("SELECT count(*), count(DISTINCT prompt_id) FROM prompts").fetchone() == (35, 35)
    finally:
        reader.close()


def test_compaction_rebuilds_a_catalog_whose_views_predate_merged_files(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with duckdb.connect(str(db)) as con:  # the insert-only view an older Ratchet wrote: plain row-range files only
        con.execute(
            "CREATE OR REPLACE VIEW prompts AS SELECT * FROM read_parquet("
            f"'s.duckdb.store/tables/prompts/rows-{'[0-9]' * 12}-{'[0-9]' * 12}.parquet', union_by_name = true)"
        )
    monkeypatch.setattr(catalog, "COMPACT_DELAY_S", 0.0)
    r = runner.invoke(app, ["gc", "--db", str(db), "--compact"])
    assert r.exit_code == 0, r.output
    _wait_until_active(db)
    monkeypatch.setattr(catalog, "KEEP_VERSIONS_S", 0.0)
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(30))
    with duckdb.connect(str(db), read_only=True) as reader:
        assert reader.execute("SELECT count(*), count(DISTINCT prompt_id) FROM prompts").fetchone() == (35, 35)


def test_without_a_record_a_planted_merged_file_is_moved_aside_and_deletes_nothing(db: Path) -> None:
    (store_dir(db) / "published.json").write_text("{not json")  # unreadable: as a store from before the record
    folder = tables_dir(db) / "prompts"
    planted = folder / f"rows-{0:012d}-{30:012d}-{0:012d}.parquet"
    planted.write_bytes((folder / _files(db)[-1]).read_bytes())
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(7))
    assert not planted.exists() and planted.with_name(f".foreign-{planted.name}").exists()
    assert len(_files(db)) == 8
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM prompts")[1] == [(35, 35)]


def test_a_lost_snapshot_file_is_written_again_from_the_writer_and_an_odd_name_is_moved_aside(db: Path) -> None:
    folder = tables_dir(db) / "prompts"
    lost = folder / _files(db)[3]
    lost.unlink()
    odd = folder / f"rows-{0:012d}-{5:012d}-x.parquet"  # listed by the views' glob, not a name Ratchet gives
    odd.write_bytes((folder / _files(db)[-1]).read_bytes())
    with transaction(db) as con:
        insert_rows(con, "prompts", _prompts(7))
    assert lost.exists() and not odd.exists()
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM prompts")[1] == [(35, 35)]
