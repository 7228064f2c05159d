"""Task files and configs are bounded before anything is materialised (issue 36, class 6): records per file (the
Parquet footer's count), decoded text (a dictionary-encoded column counted per index, never expanded), text that is
not valid UTF-8 (lone surrogates), a `range` in a test loop, and a config's nesting depth; each refused in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import ConfigError, RecordFields, load_config
from ratchet.loop.tasks.formats import TaskDataError, humaneval_tests, load_records
from ratchet.loop.tasks.readers import RECORDS_ENV, TEXT_MIB_ENV

runner = CliRunner()


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"question": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(n)))
    return path


def _load(path: Path):
    return load_records(RecordFields(path=str(path)), "t")


def test_too_many_jsonl_records_are_refused_at_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RECORDS_ENV, "3")
    f = _jsonl(tmp_path / "t.jsonl", 5)
    with pytest.raises(TaskDataError, match=rf"t\.jsonl:4: more than 3 records; raise the bound with {RECORDS_ENV}"):
        _load(f)
    monkeypatch.setenv(RECORDS_ENV, "5")
    assert len(_load(f)[1]) == 5


def test_a_parquet_files_row_count_is_read_from_its_footer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"question": ["1+1?"] * 10, "answer": ["2"] * 10}), f)
    monkeypatch.setenv(RECORDS_ENV, "9")
    with pytest.raises(TaskDataError, match=r"t\.parquet: 10 records \(its footer\) > 9"):
        _load(f)


def test_dictionary_encoded_text_is_counted_not_expanded(tmp_path: Path) -> None:
    """Before: 97 KB of Parquet holding one long string repeated per row decoded to 4.4 GB in memory."""
    n, text = 30_000, "x" * 10_000  # 300 MB once decoded, ~40 KB on disk
    f = tmp_path / "bomb.parquet"
    questions = pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([text]))
    pq.write_table(pa.table({"question": questions, "answer": pa.array(["1"] * n)}), f)
    assert f.stat().st_size < 1_000_000
    t0 = time.monotonic()
    with pytest.raises(TaskDataError, match=r"bomb\.parquet: more than 256 MiB of text once decoded \(by row \d+; "):
        _load(f)
    assert time.monotonic() - t0 < 10


def test_the_text_bound_can_be_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _jsonl(tmp_path / "t.jsonl", 2000)  # ~60 KB
    monkeypatch.setenv(TEXT_MIB_ENV, "0")
    with pytest.raises(TaskDataError, match=rf"{TEXT_MIB_ENV}='0' is not a positive integer"):
        _load(f)
    monkeypatch.setenv(TEXT_MIB_ENV, "1")
    assert len(_load(f)[1]) == 2000


def test_a_lone_surrogate_is_refused_naming_the_line(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    f.write_text('{"question": "1+1? \\ud83d\\ude00", "answer": "2"}\n{"question": "bad \\ud800", "answer": "2"}\n')
    with pytest.raises(TaskDataError, match=r"t\.jsonl:2: text that is not valid UTF-8 \(a lone surrogate '\\ud800'"):
        _load(f)
    r = runner.invoke(app, ["tasks", "check", str(f)])
    assert r.exit_code == 2 and "t.jsonl:2: text that is not valid UTF-8" in r.stderr and "Traceback" not in r.output


def test_invalid_utf8_in_parquet_is_refused_naming_the_rows(tmp_path: Path) -> None:
    f = tmp_path / "t.parquet"
    raw = pa.array([b"ok", b"\xff\xfe"], pa.binary())
    not_utf8 = pa.Array.from_buffers(pa.string(), 2, raw.buffers())  # a string column holding bytes that are not UTF-8
    pq.write_table(pa.table({"question": not_utf8, "answer": ["1", "2"]}), f)
    with pytest.raises(TaskDataError, match=r"t\.parquet\[0\.\.1\]: text that is not valid UTF-8"):
        _load(f)


def test_a_huge_range_in_a_test_loop_is_never_listed() -> None:
    """Before: a literal range(400000000) in a HumanEval check was materialised (MemoryError at 3.4 GB)."""
    t0 = time.monotonic()
    test = "def check(candidate):\n    for i in range(400000000):\n        assert candidate(i) == i\n"
    try:
        humaneval_tests(test, "f", "t[0]")
    except TaskDataError:
        pass  # a loop it cannot unroll is refused, never expanded
    assert time.monotonic() - t0 < 2


def test_a_deeply_nested_config_is_one_line(tmp_path: Path) -> None:
    """Before: a 100,000-deep TOML array ended in a RecursionError traceback."""
    f = tmp_path / "deep.toml"
    f.write_text("[generation]\nstop = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.toml:2: arrays or inline tables nested more than 32 deep"):
        load_config(f)
    r = runner.invoke(app, ["check", "--config", str(f)])
    assert r.exit_code == 2 and "nested more than 32 deep" in r.stderr and "Traceback" not in r.output
    assert r.stderr.strip().count("\n") == 0
