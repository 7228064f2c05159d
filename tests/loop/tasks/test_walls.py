"""Task files as hostile input (issue 22, classes 3 and 9): bounded decompressed size and line length, MBPP's
``test_imports`` honoured, duplicate task ids refused, and HumanEval's prompt helpers as the task's own bindings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ratchet.loop.config import RecordFields
from ratchet.loop.tasks.check import check_task_file
from ratchet.loop.tasks.formats import TaskDataError, load_records, read_records
from ratchet.loop.tasks.readers import _open_jsonl


def test_gzip_bomb_line_is_refused_in_one_line(tmp_path: Path) -> None:
    """~300 KB of gzip holding one 300 MiB line: refused at the line cap, never read whole."""
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"question": "')
        chunk = b"0" * (1024 * 1024)
        for _ in range(300):
            f.write(chunk)
        f.write(b'", "answer": "1"}\n')
    assert path.stat().st_size < 2 * 1024**2
    with pytest.raises(TaskDataError, match="line longer than 256 MiB") as e:
        list(read_records(RecordFields(path=str(path))))
    assert "\n" not in str(e.value)


def test_decompressed_size_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl.gz"
    line = json.dumps({"question": "2+2?", "answer": "4"}).encode() + b"\n"
    with gzip.open(path, "wb") as f:
        f.write(line * 10_000)
    assert len(list(_open_jsonl(path))) == 10_000
    with pytest.raises(TaskDataError, match="decompressed"):
        list(_open_jsonl(path, max_bytes=100 * len(line)))


def test_damaged_gzip_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    data = gzip.compress(b'{"question": "q", "answer": "1"}\n' * 1000)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TaskDataError, match="cannot read it"):
        list(read_records(RecordFields(path=str(path))))


# MBPP (sanitized) task 82 as published: its tests use math.isclose with "import math" in test_imports.
MBPP_82 = {
    "task_id": 82,
    "prompt": "Write a function to find the volume of a sphere.",
    "code": "import math\ndef volume_sphere(r):\n  volume=(4/3)*math.pi*r*r*r\n  return volume",
    "test_imports": ["import math"],
    "test_list": [
        "assert math.isclose(volume_sphere(10), 4188.790204786391, rel_tol=0.001)",
        "assert math.isclose(volume_sphere(25), 65449.84694978735, rel_tol=0.001)",
        "assert math.isclose(volume_sphere(20), 33510.32163829113, rel_tol=0.001)",
    ],
}


def test_mbpp_test_imports_are_the_tests_setup(tmp_path: Path) -> None:
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(MBPP_82) + "\n")
    fmt, recs = load_records(RecordFields(path=str(path), format="mbpp"), "mbpp")
    assert recs[0].tests[0] == "import math"
    results, summary = check_task_file(path, task_format="mbpp")
    assert summary["passed"] == 1, results
    # The reference without its own import still passes: the tests' math is the tests' own.
    noimport = {**MBPP_82, "code": "def volume_sphere(r):\n  return (4/3)*3.141592653589793*r**3"}
    path.write_text(json.dumps(noimport) + "\n")
    assert check_task_file(path, task_format="mbpp")[1]["passed"] == 1


def test_duplicate_task_ids_are_refused_not_merged(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    good = {"task_id": "t1", "text": "add", "test_list": ["assert add(1, 2) == 3"], "code": "def add(a, b):\n    return a + b"}
    bad = {**good, "code": "def add(a, b):\n    return 0"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    results, summary = check_task_file(path, task_format="mbpp")
    assert summary == {**summary, "total": 2, "passed": 1, "errors": 1}, (summary, results)
    assert "duplicate task_id 't1'" in next(r.detail for r in results if r.status == "error")
