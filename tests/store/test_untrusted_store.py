"""A store from someone else is input, not code (issue 36, class 5): every connection Ratchet opens on it is locked
down, a schema table that is not a base table is refused, planted snapshot files are never taken for Ratchet's
own, and a --db inside a store's folder is refused."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.store.catalog import tables_dir, writer_path
from ratchet.store.db import StoreError, connect, init_db, query, transaction
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


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    s = tmp_path / "secret.csv"
    s.write_text("name\nTOPSECRET\n")
    return s


def test_a_view_in_place_of_a_schema_table_is_refused_in_one_line(db: Path, secret: Path) -> None:
    with duckdb.connect(str(writer_path(db))) as con:
        con.execute("DROP TABLE campaigns")
        con.execute(f"CREATE VIEW campaigns AS SELECT name AS campaign_id, name FROM read_csv('{secret}')")
    with pytest.raises(StoreError, match=r"its schema table campaigns is a view, not a base table"):
        with connect(db, read_only=True):
            pass
    r = runner.invoke(app, ["status", "--db", str(db)])
    assert r.exit_code == 2 and "not a base table" in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr
    assert "TOPSECRET" not in r.stdout + r.stderr


def test_ratchets_own_connections_read_no_file_outside_the_store(db: Path, secret: Path, tmp_path: Path) -> None:
    for read_only in (True, False):
        with connect(db, read_only=read_only) as con:
            for sql in (f"SELECT * FROM read_csv('{secret}')", f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'"):
                with pytest.raises(duckdb.PermissionException):
                    con.execute(sql)
            with pytest.raises(duckdb.Error):  # and it cannot be switched back on
                con.execute("SET enable_external_access = true")
    assert not (tmp_path / "out.csv").exists()


def test_a_planted_row_range_is_moved_aside_and_new_rows_still_publish(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a planted rows-0-999999999999 made the writer believe every row was published (readers saw it, and
    no new row, forever)."""
    folder = tables_dir(db) / "prompts"
    real = sorted(folder.glob("rows-*.parquet"))[-1]
    forged = pq.read_table(real).slice(0, 1).to_pylist()
    forged[0].update(prompt_id="forged", question="FORGED")
    planted = folder / f"rows-{0:012d}-{999999999999:012d}.parquet"
    pq.write_table(pa.Table.from_pylist(forged, schema=pq.read_schema(real)), planted)
    assert ("forged",) in query(db, "SELECT prompt_id FROM prompts")[1]  # readers see it until the next publish
    with caplog.at_level(logging.WARNING, logger="ratchet.store.catalog"):
        with transaction(db) as con:
            insert_rows(con, "prompts", [_prompt(3)])
    assert "not written by Ratchet" in caplog.text and planted.name in caplog.text
    ids = sorted(r[0] for r in query(db, "SELECT prompt_id FROM prompts")[1])
    assert ids == ["p1", "p2", "p3"] and (folder / f".foreign-{planted.name}").exists()


def test_a_planted_version_is_never_taken_for_the_newest(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a planted v-999999999999 made the next version 13 digits, which readers ignore: the planted rows
    were the table's content forever. Now it is not in the writer's record: moved aside at the next publish."""
    folder = tables_dir(db) / "campaigns"
    schema = pq.read_schema(sorted(folder.glob("v-*.parquet"))[-1])
    schema = pa.schema([f.with_nullable(True) for f in schema])
    row = {f.name: None for f in schema} | {"campaign_id": "forged", "name": "FORGED"}
    pq.write_table(pa.Table.from_pylist([row], schema=schema), folder / "v-999999999999.parquet")
    pq.write_table(pa.Table.from_pylist([row], schema=schema), folder / "v-1000000000000.parquet")  # 13 digits
    assert query(db, "SELECT name FROM campaigns")[1] == [("FORGED",)]  # readers see it until the next publish
    with caplog.at_level(logging.WARNING, logger="ratchet.store.catalog"):
        with transaction(db) as con:
            insert_rows(con, "prompts", [_prompt(3)])
    assert query(db, "SELECT name FROM campaigns")[1] == []
    assert (folder / ".foreign-v-999999999999.parquet").exists()
    assert "v-1000000000000.parquet" in caplog.text  # a name the writer never gives: ignored and reported
    names = sorted(f.name for f in folder.glob("v-*.parquet"))
    assert all(len(n) == len("v-000000000001.parquet") for n in names if n != "v-1000000000000.parquet")


@pytest.mark.parametrize("inside", ["{db}.store/writer.duckdb", "{db}.store/tables/prompts/x.duckdb"])
def test_a_db_inside_a_store_folder_is_refused(db: Path, inside: str) -> None:
    """Before: --db <db>.store/writer.duckdb was taken for a legacy store and the writer file moved away."""
    bad = inside.format(db=db)
    before = writer_path(db).read_bytes()
    for args in (["status", "--db", bad], ["sql", "--db", bad, "SELECT 1"], ["gc", "--db", bad]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and f"is inside the folder {db}.store of the store {db}; pass --db {db}" in r.stderr, (
            args,
            r.output,
        )
    with pytest.raises(StoreError, match="inside the folder"):
        with connect(bad):
            pass
    assert writer_path(db).read_bytes() == before and not Path(bad + ".store").exists()
