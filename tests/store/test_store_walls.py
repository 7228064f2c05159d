"""The store's files as hostile input and `ratchet sql` as a hostile reader (issue 22, classes 4-7).

Every writing form of SQL is refused by an allow-list over DuckDB's own parser (each ``duckdb.StatementType``
is enumerated below: only SELECT, EXPLAIN of a SELECT and named read pragmas pass); a file planted in the
snapshot folder fails no writer; output paths inside a store are refused and existing files are kept
without ``--force``; views and macros stored in a store's files never execute; a copied store answers the
same queries through ``ratchet sql`` and through DuckDB's own Python opened in the store's folder.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.catalog import store_dir, tables_dir, writer_path
from ratchet.store.db import QueryRefused, StoreError, connect, init_db, one_query, query, transaction
from ratchet.store.ingest import insert_rows

runner = CliRunner()


def _prompt(i: int) -> dict:
    return dict(prompt_id=f"p{i}", source="s", task="t", question=f"q{i}", answer="1", split="train")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    init_db(path)
    with transaction(path) as con:
        insert_rows(con, "prompts", [_prompt(1), _prompt(2)])
    return path


def _files(db: Path) -> set[str]:
    return {str(p.relative_to(db.parent)) for p in db.parent.rglob("*") if p.is_file()}


# One sample per statement kind that is not a plain read, and the writing forms the issue names.
WRITES = {
    "explain_analyze_copy_forges_a_version": "EXPLAIN ANALYZE COPY (SELECT 'forged' AS x) TO '{tables}/checkpoints/v-999999999999.parquet'",
    "explain_analyze_copy_plants_bad_name": "EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{tables}/prompts/rows-x.parquet'",
    "explain_options_analyze_copy": "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1) TO '{tables}/x.parquet'",
    "copy_to": "COPY (SELECT 1) TO '{tables}/x.csv'",
    "copy_from": "COPY prompts FROM '{tables}/x.csv'",
    "copy_database": "COPY FROM DATABASE memory TO memory",
    "export_database": "EXPORT DATABASE '{tables}/dump'",
    "import_database": "IMPORT DATABASE '{tables}'",
    "pragma_import_database": "PRAGMA import_database('{tables}')",
    "attach": "ATTACH '{tables}/x.duckdb' AS x",
    "detach": "DETACH memory",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set": "SET threads = 1",
    "reset": "RESET threads",
    "pragma_set": "PRAGMA threads = 1",
    "use": "USE memory",
    "checkpoint": "CHECKPOINT",
    "call": "CALL pragma_version()",
    "create_table": "CREATE TABLE x (a INT)",
    "create_macro": "CREATE MACRO m(a) AS a",
    "insert": "INSERT INTO prompts SELECT * FROM prompts",
    "update": "UPDATE prompts SET task = 'x'",
    "delete": "DELETE FROM prompts",
    "merge": "MERGE INTO prompts USING prompts AS p ON false WHEN NOT MATCHED THEN DO NOTHING",
    "drop": "DROP VIEW prompts",
    "alter": "ALTER VIEW prompts RENAME TO p2",
    "prepare": "PREPARE p AS SELECT 1",
    "execute": "EXECUTE p",
    "vacuum": "VACUUM",
    "analyze": "ANALYZE",
    "transaction": "BEGIN TRANSACTION",
    "set_variable": "SET VARIABLE x = 1",
    "pivot_multi": "PIVOT prompts ON split USING count(*)",
    "explain_of_a_write": "EXPLAIN INSERT INTO prompts SELECT * FROM prompts",
    "two_statements": "SELECT 1; COPY (SELECT 1) TO '{tables}/y.csv'",
}
READS = [
    "SELECT count(*) FROM prompts",
    "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
    "FROM prompts",
    "DESCRIBE prompts",
    "SHOW TABLES",
    "SUMMARIZE prompts",
    "EXPLAIN SELECT * FROM prompts",
    "EXPLAIN ANALYZE SELECT count(*) FROM prompts",
    "PRAGMA table_info('prompts')",
    "PIVOT prompts ON split IN ('train', 'heldout') USING count(*)",
]


def test_every_statement_type_is_classified() -> None:
    """The enumeration: every ``duckdb.StatementType`` is either one of the read kinds or refused by default."""
    from ratchet.store.db import READ_STATEMENT_TYPES

    assert READ_STATEMENT_TYPES <= set(duckdb.StatementType.__members__)
    assert READ_STATEMENT_TYPES == {"SELECT", "EXPLAIN", "PRAGMA"}
    kinds = {duckdb.extract_statements(q.format(tables="/t"))[0].type.name for q in WRITES.values()}
    refused_kinds = set(duckdb.StatementType.__members__) - READ_STATEMENT_TYPES - {"INVALID", "RELATION", "LOGICAL_PLAN"}
    # Each kind a statement can parse to outside the read kinds has a sample here. The parser never yields
    # INVALID, RELATION or LOGICAL_PLAN, and maps ANALYZE to VACUUM, SET VARIABLE to SET, COPY FROM DATABASE
    # to PRAGMA and CREATE FUNCTION to CREATE (sampled above); EXTENSION is a parser extension's statement.
    assert refused_kinds - kinds <= {"EXTENSION", "CREATE_FUNC", "ANALYZE", "VARIABLE_SET", "COPY_DATABASE"}, (
        refused_kinds - kinds
    )


@pytest.mark.parametrize("name", sorted(WRITES))
def test_sql_refuses_every_writing_form(db: Path, name: str) -> None:
    before = _files(db)
    sql = WRITES[name].format(tables=tables_dir(db).resolve())
    with pytest.raises((QueryRefused, duckdb.Error)):
        query(db, sql)
    assert _files(db) == before, "ratchet sql changed the store's files"
    r = runner.invoke(app, ["sql", "--db", str(db), sql])
    assert r.exit_code != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert _files(db) == before


@pytest.mark.parametrize("sql", READS)
def test_sql_still_runs_every_read(db: Path, sql: str) -> None:
    one_query(sql)
    cols, _ = query(db, sql)
    assert cols


def test_a_foreign_file_in_the_snapshot_folder_fails_no_writer(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Planted by someone with write access to the folder: the writer ignores it and says so in the log."""
    for rel in ("prompts/rows-x.parquet", "prompts/rows-1-2-3.parquet", "checkpoints/v-zzz.parquet", "rounds/v-.parquet"):
        (tables_dir(db) / rel).write_bytes(b"not parquet")
    with caplog.at_level(logging.WARNING, logger="ratchet.store.catalog"):
        with transaction(db) as con:
            insert_rows(con, "prompts", [_prompt(3)])
        init_db(db)
    assert "not written by Ratchet" in caplog.text
    with connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM prompts").fetchone() == (3,)


@pytest.mark.parametrize("target", ["{db}", "{db}.store/writer.duckdb", "{db}.store/tables/prompts/x.parquet", "{db}.wal"])
@pytest.mark.parametrize("command", ["export", "report"])
def test_output_paths_inside_a_store_are_refused(db: Path, target: str, command: str) -> None:
    out = target.format(db=db)
    before = {p: p.read_bytes() for p in map(Path, [db, writer_path(db)])}
    args = ["export", "--campaign", "c", "--what", "rollouts", "--format", "jsonl"] if command == "export" else ["report"]
    r = runner.invoke(app, [*args, "--db", str(db), "--out", out, "--force"])
    assert r.exit_code != 0 and "inside the store" in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in before} == before


def test_existing_output_is_kept_without_force(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("keep me")
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(out)])
    assert r.exit_code != 0 and "--force" in r.stderr and out.read_text() == "keep me"
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(out), "--force"])
    assert r.exit_code == 0 and out.read_text() != "keep me"


def test_tampered_views_and_macros_never_execute(db: Path, tmp_path: Path) -> None:
    """A store from someone else: its stored view SQL is replaced by the schema's, its macros refused."""
    secret = tmp_path / "secret.csv"
    secret.write_text("x\nTOPSECRET\n")
    with duckdb.connect(str(writer_path(db))) as con:
        con.execute(f"CREATE OR REPLACE VIEW round_summary AS SELECT x AS campaign FROM read_csv('{secret}')")
    with connect(db, read_only=True) as con:
        assert "TOPSECRET" not in str(con.execute("SELECT * FROM round_summary").fetchall())
    with duckdb.connect(str(db)) as con:  # the reader catalog too
        con.execute(f"CREATE OR REPLACE VIEW prompts AS SELECT x AS prompt_id FROM read_csv('{secret}')")
    assert query(db, "SELECT prompt_id FROM prompts ORDER BY 1")[1] == [("p1",), ("p2",)]
    r = runner.invoke(app, ["status", "--db", str(db)])
    assert "TOPSECRET" not in r.stdout + r.stderr
    with duckdb.connect(str(writer_path(db))) as con:
        con.execute("CREATE MACRO lower(s) AS 'evil'")
    with pytest.raises(StoreError, match="macro"):
        with connect(db, read_only=True):
            pass


def test_a_copied_store_answers_the_same_queries(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q = "SELECT prompt_id FROM prompts ORDER BY 1"
    want = query(db, q)[1]
    copy = tmp_path / "laptop"
    copy.mkdir()
    shutil.copy2(db, copy / db.name)
    shutil.copytree(store_dir(db), copy / store_dir(db).name)
    moved = tmp_path / "gone"
    os.rename(db, tmp_path / "gone.duckdb")
    os.rename(store_dir(db), moved)  # the old location is gone: nothing may read it
    new = copy / db.name
    assert query(new, q)[1] == want
    r = runner.invoke(app, ["sql", "--db", str(new), "--format", "csv", q])
    assert r.exit_code == 0 and r.stdout.splitlines() == ["prompt_id", "p1", "p2"], r.stderr
    monkeypatch.chdir(copy)  # DuckDB's own Python, opened in the store's folder on the copied reader file
    with duckdb.connect(db.name, read_only=True) as con:
        assert con.execute(q).fetchall() == want
    with transaction(new) as con:  # and the copy stays writable: readers see the new row
        insert_rows(con, "prompts", [_prompt(3)])
    assert len(query(new, q)[1]) == 3
