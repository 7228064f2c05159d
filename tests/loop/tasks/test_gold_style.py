"""Golds checked for what their file says they are (issue 42, finding 1): one check for `tasks check`, `init` and
the campaign's loader, every bad gold listed as `<path>:<line>: <what was found>`."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import RecordFields
from ratchet.loop.tasks.check import check_task_file
from ratchet.loop.tasks.formats import TaskDataError, load_records
from ratchet.loop.tasks.gold_style import gold_style_problems
from ratchet.loop.tasks.starter import read_source

runner = CliRunner()


def _gsm8k(tmp_path, extra: list[dict]):
    rows = [{"question": f"Tom has {i} pens and gets 2 more. How many? ({i})", "answer": f"{i} + 2 = <<{i}+2={i + 2}>>{i + 2}.\n#### {i + 2}"} for i in range(18)]  # fmt: skip
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows + extra))
    return path


BAD = [
    {"question": "Ann has ten pens and gets two more. How many?", "answer": "She has 12 pens.\n#### twelve"},
    {"question": "Ben has 3 cards and gets 4 more. How many?", "answer": "Ben has 3 + 4 = 7 cards."},
]


def test_every_bad_gold_of_a_gsm8k_file_is_listed_by_tasks_check_and_refused_by_the_loader(tmp_path):
    path = _gsm8k(tmp_path, BAD)
    results, summary = check_task_file(path)
    errors = {r.task_id: r.detail for r in results if r.status == "error"}
    assert set(errors) == {f"{path}:19", f"{path}:20"} and summary["passed"] == 18
    assert errors[f"{path}:19"].startswith(f"{path}:19: gold 'twelve' is text") and "'#### 12'" in errors[f"{path}:19"]
    assert "no '#### <answer>'" in errors[f"{path}:20"] and "19 of the file's 20 golds" in errors[f"{path}:20"]
    # the campaign's loader (init, the preflight, a round) refuses the file naming both lines, not only the first
    with pytest.raises(TaskDataError) as e:
        load_records(RecordFields(path=str(path), format="math"), "gsm")
    assert f"{path}:19: gold 'twelve'" in str(e.value) and f"{path}:20: no '####" in str(e.value)
    with pytest.raises(TaskDataError, match="2 gold"):
        read_source(path, 0.2)  # `ratchet init --tasks`
    r = runner.invoke(app, ["tasks", "check", str(path), "--format", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout.splitlines()[-1])["errors"] == 2


def test_a_clean_file_and_a_file_of_text_golds_pass():
    golds = [(f"f:{i}", f"x\n#### {i}", str(i)) for i in range(10)]
    assert gold_style_problems(golds) == []
    words = [(f"f:{i}", w, w) for i, w in enumerate(["yes", "no", "Monday", "blue", "yes"])]
    assert gold_style_problems(words) == []  # literal comparison is the file's intent
    mixed = [*golds, ("f:11", "x\n#### 1/2", "1/2"), ("f:12", "x\n#### [1, 2)", "[1, 2)"), ("f:13", "#### x^2+1", "x^2+1")]
    assert gold_style_problems(mixed) == []  # fractions, intervals, expressions are values the verifier compares


def test_tasks_check_detects_metamathqa_fields_as_init_does(tmp_path):
    path = tmp_path / "mq.jsonl"
    rows = [{"query": f"What is {i} + 1?", "response": f"We add 1 to {i}.\nThe answer is: {i + 1}"} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, summary = check_task_file(path)
    assert summary["passed"] == 6
    assert read_source(path, 0.2).fields == {"question_field": "query", "answer_field": "response", "format": "math"}
    # a missing field points at the command's flag, not a config key
    bad = tmp_path / "nf.jsonl"
    bad.write_text(json.dumps({"problem_text": "What is 2+2?", "answer": "4"}) + "\n")
    r = runner.invoke(app, ["tasks", "check", str(bad), "--format", "math", "--output", "json"])
    assert "(or pass --question-field)" in r.stdout and "question_field)" not in r.stdout


def test_a_gold_that_also_fails_to_parse_is_named_for_its_missing_mark_and_every_bad_record_is_listed(tmp_path):
    """'He has 6 apples.' is not math (a parse error of its own) but the root cause is the missing '####'; a record
    with no gold at all is listed beside it, by the loader as by tasks check."""
    bad = [{"question": "Mia has 4 apples and gets 2 more. How many?", "answer": "He has 6 apples."},
           {"question": "Sam has 1 ball and gets 1 more. How many?"}]  # fmt: skip
    path = _gsm8k(tmp_path, bad)
    with pytest.raises(TaskDataError) as e:
        load_records(RecordFields(path=str(path), format="math"), "gsm")
    msg = str(e.value)
    assert "2 task(s) cannot be used" in msg and f"{path}:19: no '#### <answer>'" in msg and f"{path}:20:" in msg, msg
    assert "cannot be parsed" not in msg
    results, _ = check_task_file(path)
    errors = {r.task_id: r.detail for r in results if r.status == "error"}
    assert "no '#### <answer>'" in errors[f"{path}:19"] and set(errors) == {f"{path}:19", f"{path}:20"}, errors
