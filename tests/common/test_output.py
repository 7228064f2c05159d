"""Files written at a path a person named (issue 36, class 3): never through a planted link, never inside a store,
a run dir, a checkpoint or $RATCHET_HOME, each refusal naming the path and why."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import duckdb
import pytest

from ratchet.common import output
from ratchet.common.output import OutputRefused, check_output, output_path, write_output


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RATCHET_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PREFECT_HOME", raising=False)
    return tmp_path / "home"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("precious")
    return v


def test_links_planted_at_the_old_temporary_names_are_never_followed(tmp_path: Path, victim: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    for name in (".report.html.tmp", f".report.html.tmp-{os.getpid()}", f".report.html.tmp-{os.getpid() + 1}"):
        (shared / name).symlink_to(victim)
    write_output(shared / "report.html", "<html>")
    assert victim.read_text() == "precious" and (shared / "report.html").read_text() == "<html>"
    left = sorted(p.name for p in shared.iterdir())
    assert left == sorted(
        [".report.html.tmp", f".report.html.tmp-{os.getpid()}", f".report.html.tmp-{os.getpid() + 1}", "report.html"]
    )


def test_the_temporary_is_random_private_and_gone_afterwards(tmp_path: Path) -> None:
    seen = []
    for _ in range(2):
        with output_path(tmp_path / "a.txt", force=True) as tmp:
            seen.append(tmp.parent)
            assert tmp.parent.parent == tmp_path and tmp.parent.name.startswith(".a.txt.")
            assert tmp.parent.stat().st_mode & 0o777 == 0o700
            tmp.write_text("x")
    assert seen[0] != seen[1] and [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_link_at_the_target_is_refused_or_replaced_itself(tmp_path: Path, victim: Path) -> None:
    out = tmp_path / "report.html"
    out.symlink_to(victim)
    with pytest.raises(OutputRefused, match=r"report.html exists \(a symbolic link to .*victim\).*never writes through a link"):
        write_output(out, "new")
    write_output(out, "new", force=True)  # replaces the link, not the file it names
    assert victim.read_text() == "precious" and not out.is_symlink() and out.read_text() == "new"
    folder = tmp_path / "hf"
    folder.symlink_to(tmp_path)
    with pytest.raises(OutputRefused, match="symbolic link"):
        check_output(folder, folder=True, force=True)


def test_a_link_planted_while_writing_is_refused_at_the_rename(tmp_path: Path, victim: Path) -> None:
    out = tmp_path / "export.jsonl"
    with pytest.raises(OutputRefused, match="symbolic link"):
        with output_path(out) as tmp:
            tmp.write_text("rows")
            out.symlink_to(victim)
    assert victim.read_text() == "precious" and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _store(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    (tmp_path / "s.duckdb.store").mkdir()
    duckdb.connect(str(tmp_path / "s.duckdb.store" / "writer.duckdb")).close()
    duckdb.connect(str(db)).close()
    return db


def _run_dir(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    (runs / "camp" / "round-1" / "generate").mkdir(parents=True)
    (runs / "camp" / "config.json").write_text("{}")
    (runs / "checkpoints" / "abc").mkdir(parents=True)
    (runs / "checkpoints" / "abc" / "ratchet_manifest.json").write_text("{}")
    return runs


def _protected(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    db = _store(tmp_path)
    runs = _run_dir(tmp_path)
    legacy = tmp_path / "legacy.db"
    duckdb.connect(str(legacy)).close()
    prefect = tmp_path / "elsewhere" / "prefect.db"
    prefect.parent.mkdir()
    sqlite3.connect(prefect).execute("CREATE TABLE t (x)").connection.close()
    return {
        "catalog": (db, f"inside the store {db} (the store itself: its reader catalog)"),
        "wal": (Path(f"{db}.wal"), f"inside the store {db} (its WAL)"),
        "writer": (tmp_path / "s.duckdb.store" / "writer.duckdb", f"inside the store {db} (under its folder"),
        "snapshot": (tmp_path / "s.duckdb.store" / "tables" / "prompts" / "v-1.parquet", "inside the store"),
        "legacy store": (legacy, "a DuckDB database (a store)"),
        "sqlite": (prefect, "an SQLite database"),
        "run dir": (runs / "report.html", f"inside the run dir {runs}"),
        "campaign folder": (runs / "camp" / "config.json", f"inside the campaign folder {runs / 'camp'}"),
        "stage folder": (runs / "camp" / "round-1" / "generate" / "part-0.parquet", "inside the campaign folder"),
        "checkpoint": (
            runs / "checkpoints" / "abc" / "model.safetensors",
            f"inside the checkpoint folder {runs / 'checkpoints' / 'abc'}",
        ),
        "ratchet home": (tmp_path / "home" / "prefect" / "prefect.db", "under $RATCHET_HOME"),
    }


CASES = ["catalog", "wal", "writer", "snapshot", "legacy store", "sqlite", "run dir", "campaign folder", "stage folder",
         "checkpoint", "ratchet home"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_protected_paths_are_refused_also_with_force(tmp_path: Path, case: str) -> None:
    target, why = _protected(tmp_path)[case]
    before = target.read_bytes() if target.is_file() else None
    for write in (lambda: write_output(target, "x", force=True), lambda: check_output(target, folder=True)):
        with pytest.raises(OutputRefused) as e:
            write()
        msg = str(e.value)
        assert msg.startswith(f"--out {target} is refused: it is") and why in msg and "--force never" in msg, msg
    assert (target.read_bytes() if target.is_file() else None) == before


def test_prefect_home_and_named_run_dirs_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "ph"))
    with pytest.raises(OutputRefused, match=r"under \$PREFECT_HOME"):
        check_output(tmp_path / "ph" / "x.html", force=True)
    with pytest.raises(OutputRefused, match=r"inside the run dir .*s\.runs"):
        check_output(tmp_path / "s.runs" / "x.html", force=True, protected=[tmp_path / "s.runs"])


def test_ordinary_paths_are_written_and_existing_files_need_force(tmp_path: Path) -> None:
    _run_dir(tmp_path)  # beside a run dir (the default layout: ratchet.runs next to report.html) is fine
    out = tmp_path / "report.html"
    write_output(out, "one")
    with pytest.raises(OutputRefused, match=r"report.html exists; pass --force"):
        write_output(out, "two")
    write_output(out, "two", force=True)
    assert out.read_text() == "two"
    (tmp_path / "hf").mkdir()
    with pytest.raises(OutputRefused, match="--path .*hf exists; a folder is never replaced"):
        check_output(tmp_path / "hf", folder=True, force=True, option="--path")


def test_names_match_the_modules_that_write_them() -> None:
    from ratchet.loop.campaign.round_context import PINNED_EVAL_FILE
    from ratchet.loop.checkpoints import MANIFEST, ratchet_home
    from ratchet.store.catalog import store_dir, writer_path

    assert output.CHECKPOINT_MANIFEST == MANIFEST and output.PINNED_EVAL_FILE == PINNED_EVAL_FILE
    assert store_dir("x.duckdb").name == "x.duckdb" + output.STORE_SUFFIX and writer_path("x.duckdb").name == output.WRITER_FILE
    assert output.ratchet_home() == ratchet_home()
