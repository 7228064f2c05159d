"""`ratchet init --tasks`: a campaign over your own files that renders the prompts a first round can learn from
(issue 24, findings 2-4)."""

import json

import pytest
from typer.testing import CliRunner

from ratchet.flows.cli import app
from ratchet.loop.config import RecordFields, load_config
from ratchet.loop.tasks.formats import TaskDataError, detect_format, math_gold, worked_solution
from ratchet.loop.tasks.task_sets import TaskSet

runner = CliRunner()


def gsm8k_file(path, n=60):
    recs = [
        {
            "question": f"Sam has {i % 9 + 1} pens and buys {i % 5 + 1} more. How many pens now? (shop {i})",
            "answer": f"Sam has {i % 9 + 1} + {i % 5 + 1} = <<{i % 9 + 1}+{i % 5 + 1}={i % 9 + i % 5 + 2}>>{i % 9 + i % 5 + 2} pens.\n"
            f"#### {i % 9 + i % 5 + 2}",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def metamath_file(path, n=40):
    recs = [{"query": f"What is {i} plus 3?", "response": f"We add {i} + 3 = {i + 3}.\nThe answer is: {i + 3}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_init_tasks_writes_sources_with_worked_examples(tmp_path):
    gsm, meta = gsm8k_file(tmp_path / "gsm.jsonl"), metamath_file(tmp_path / "meta.jsonl")
    cfg_path = tmp_path / "conf" / "ratchet.toml"
    cfg_path.parent.mkdir()
    r = runner.invoke(app, ["init", "--tasks", str(gsm), str(meta), "--path", str(cfg_path)])
    assert r.exit_code == 0, r.output
    cfg = load_config(cfg_path)
    assert [s.source_name() for s in cfg.tasks.sources] == ["gsm", "meta"]
    assert cfg.tasks.sources[1].question_field == "query" and cfg.tasks.sources[1].answer_field == "response"
    assert cfg.generation.max_new_tokens == "auto" and cfg.generation.max_new_tokens_min >= 64
    tasks = TaskSet(cfg.tasks)
    held = tasks.eval_prompts(cfg)  # the held-out size written is one every source can give
    assert len(held) == cfg.tasks.heldout_prompts > 0
    for name in ("gsm", "meta"):
        prompt = next(p for p in tasks.draw(8, "train", seed=0) if p.source == name)
        chat = tasks.messages(prompt)
        assert chat[0]["content"].startswith("Solve the problem") and "arithmetic" not in chat[0]["content"]
        shots = [m["content"] for m in chat[2:-1:2]]
        assert len(shots) == 2 and all(s.splitlines()[-1].startswith("Answer: ") and len(s.splitlines()) > 1 for s in shots)
        assert not any("<<" in s or "####" in s or "The answer is" in s for s in shots)
        shown = {m["content"] for m in chat[1:-1:2]}
        assert not shown & {p.question for p in held + tasks.draw(200, "train", seed=1)}  # never drawn again


def test_metamath_golds_and_field_mapping_detection():
    spec = RecordFields(path="x", question_field="query", answer_field="response")
    rec = {"query": "What is 48 + 3?", "response": "Add them: 48 + 3 = 51.\nThe answer is: 51"}
    assert detect_format(rec, "f:1", spec) == "math"  # no `format` needed once the fields are mapped
    assert math_gold(rec, "f:1", "response") == "51"
    assert worked_solution(rec, spec, "51") == "Add them: 48 + 3 = 51.\nAnswer: 51"
    with pytest.raises(TaskDataError, match="cannot tell the task format"):
        detect_format(rec, "f:1")


def test_init_tasks_refuses_a_bad_file_in_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q?", "answer": "\\\\frac{"}\n')
    r = runner.invoke(app, ["init", "--tasks", str(bad), "--path", str(tmp_path / "r.toml")])
    assert r.exit_code == 2 and "cannot be parsed by the math verifier" in r.stderr and not (tmp_path / "r.toml").exists()
