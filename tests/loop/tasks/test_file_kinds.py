"""Task files a newcomer has at hand (issue 42, finding 12): a UTF-8 byte-order mark is read, a CSV/TSV file with a
header is read as records, and a JSON array (one line or pretty-printed) is refused in one line with the command that
converts it."""

import json

import pytest

from ratchet.loop.config import RecordFields
from ratchet.loop.tasks.formats import load_records
from ratchet.loop.tasks.readers import TaskDataError, read_records


def _records(path):
    return list(read_records(RecordFields(path=str(path))))


def test_a_byte_order_mark_is_not_part_of_the_first_record(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"question": "1 + 1?", "answer": "2"}).encode() + b"\n")
    assert _records(path) == [(f"{path}:1", {"question": "1 + 1?", "answer": "2"})]


def test_csv_and_tsv_files_are_read_by_their_header(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text('\ufeffquestion,answer\n"What is 1, plus 1?",2\n"Two\nlines?",3\n', encoding="utf-8")
    assert _records(csv_path) == [
        (f"{csv_path}:2", {"question": "What is 1, plus 1?", "answer": "2"}),
        (f"{csv_path}:4", {"question": "Two\nlines?", "answer": "3"}),
    ]
    fmt, recs = load_records(RecordFields(path=str(csv_path)), "t")
    assert fmt == "math" and [r.answer for r in recs] == ["2", "3"]
    tsv = tmp_path / "t.tsv"
    tsv.write_text("question\tanswer\n3 + 4?\t7\n")
    assert _records(tsv) == [(f"{tsv}:2", {"question": "3 + 4?", "answer": "7"})]
    empty = tmp_path / "e.csv"
    empty.write_text("")
    with pytest.raises(TaskDataError, match="no header row"):
        _records(empty)


@pytest.mark.parametrize("text", ['[{"question": "1+1?", "answer": "2"}]\n', '[\n  {"question": "1+1?", "answer": "2"}\n]\n'])
def test_a_json_array_is_refused_with_the_command_that_converts_it(tmp_path, text):
    path = tmp_path / "arr.jsonl"
    path.write_text(text)
    with pytest.raises(TaskDataError) as e:
        _records(path)
    assert f"{path}:1: a JSON array or a JSON document over several lines, not JSON Lines" in str(e.value)
    assert "arr.jsonl > tasks.jsonl" in str(e.value)
