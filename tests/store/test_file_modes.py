"""Files Ratchet creates are owner-only by default (umask 077), or group-readable with `[service] file_mode = "group"`."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet.common.files import FILE_MODES, file_mode, set_file_mode
from ratchet.store.db import init_db, transaction
from ratchet.store.ingest import insert_rows

ALLOWED = {"private": (0o600, 0o700), "group": (0o640, 0o750)}  # (files, folders): no bit outside these


def modes_outside(root: Path, mode: str, since: float = 0.0) -> list[str]:
    """Every file or folder under ``root`` (changed after ``since``) with a permission bit ``mode`` does not allow."""
    files, dirs = ALLOWED[mode]
    bad = []
    for p in [root, *root.rglob("*")] if root.is_dir() else [root]:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode) or st.st_mtime < since:
            continue
        allowed = dirs if stat.S_ISDIR(st.st_mode) else files
        if stat.S_IMODE(st.st_mode) & ~allowed:
            bad.append(f"{p} {stat.S_IMODE(st.st_mode):04o}")
    return bad


@pytest.mark.parametrize("mode", ["private", "group"])
def test_a_store_and_its_reader_catalog_follow_the_file_mode(tmp_path, mode):
    db = tmp_path / "s" / "s.duckdb"
    before = os.umask(0o022)  # the usual default, under which DuckDB and Parquet files come out 0644
    try:
        with file_mode(mode):
            db.parent.mkdir()
            init_db(db)
            with transaction(db) as con:  # a commit publishes Parquet snapshots for readers
                insert_rows(con, "prompts", [dict(prompt_id="p", source="s", task="t", question="q", answer="1", split="train")])
        assert os.umask(0o022) == 0o022  # restored after the block
    finally:
        os.umask(before)
    created = [db.parent, *db.parent.rglob("*")]
    assert len(created) > 5 and any(p.suffix == ".parquet" for p in created)
    assert modes_outside(db.parent, mode) == []
    if mode == "group":  # readable by the group: files g+r, folders g+rx
        assert all(p.stat().st_mode & (0o050 if p.is_dir() else 0o040) for p in created)


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="not one of private, group"):
        set_file_mode("world")
    assert set(FILE_MODES) == {"private", "group"}


@pytest.mark.parametrize("env, mode", [(None, "private"), ("group", "group")])
def test_the_cli_creates_private_files_unless_told_group(tmp_path, env, mode):
    out = tmp_path / "r.toml"
    environ = {k: v for k, v in os.environ.items() if k != "RATCHET_FILE_MODE"} | ({"RATCHET_FILE_MODE": env} if env else {})
    ratchet = Path(sys.executable).parent / "ratchet"
    r = subprocess.run([str(ratchet), "init", "--path", str(out)], env=environ, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(out.stat().st_mode) == ALLOWED[mode][0]


def test_the_cli_refuses_a_bad_file_mode():
    ratchet = Path(sys.executable).parent / "ratchet"
    r = subprocess.run([str(ratchet), "--help"], env={**os.environ, "RATCHET_FILE_MODE": "0644"}, capture_output=True, text=True)
    assert r.returncode == 2 and "RATCHET_FILE_MODE" in r.stderr and "private, group" in r.stderr
