"""`ratchet init --tasks`: a campaign over your own files that renders the prompts a first round can learn from
(issue 24, findings 2-4)."""

import json
from pathlib import Path

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


def test_init_writes_paths_relative_to_the_config_folder_so_the_folder_can_move(tmp_path):
    """Issue 42, finding 3: the task file and the few-shot file under the config's folder are written relative to it
    (read against the config's folder, whatever the working directory); a file elsewhere stays absolute."""
    import shutil

    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    gsm = gsm8k_file(proj / "data" / "gsm.jsonl")
    outside = metamath_file(tmp_path / "meta.jsonl")
    r = runner.invoke(app, ["init", "--tasks", str(gsm), str(outside), "--path", str(proj / "ratchet.toml")])
    assert r.exit_code == 0, r.output
    text = (proj / "ratchet.toml").read_text()
    assert 'path = "data/gsm.jsonl"' in text and 'fewshot_path = "ratchet.gsm.fewshot.jsonl"' in text
    assert f'path = "{outside}"' in text and str(proj) not in text
    moved = shutil.move(str(proj), str(tmp_path / "elsewhere"))  # the folder goes to the server
    cfg = load_config(Path(moved) / "ratchet.toml")
    assert cfg.tasks.sources[0].path == str(Path(moved) / "data" / "gsm.jsonl")
    assert len(TaskSet(cfg.tasks).eval_prompts(cfg)) == cfg.tasks.heldout_prompts


def test_init_sizes_the_heldout_set_with_the_gate_plan_and_says_why(tmp_path):
    """Issue 42, finding 5: the size comes from the gate's plan (capped by what the files give, each source its equal
    share); the terminal says what was chosen, the promote rates at that size and the fix naming
    tasks.heldout_fraction."""
    from ratchet.loop.config import GateConfig
    from ratchet.loop.gate.error_rates import needed_prompts, rounded_up

    target = rounded_up(needed_prompts(GateConfig(), 100))
    small = gsm8k_file(tmp_path / "small.jsonl")
    r = runner.invoke(app, ["init", "--tasks", str(small), "--path", str(tmp_path / "s.toml")])
    assert r.exit_code == 0, r.output
    cfg = load_config(tmp_path / "s.toml")
    line = " ".join(r.stdout.split())
    assert f"held-out set: only {cfg.tasks.heldout_prompts} prompts (all the file gives)" in line
    assert f"needs ~{target}" in line and "raise tasks.heldout_fraction to ~" in line and "in s.toml" in line
    assert "promotes a true +10 points" in line
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"question": f"What is {i} + 3?", "answer": f"#### {i + 3}"}) + "\n" for i in range(3000)))
    r = runner.invoke(app, ["init", "--tasks", str(big), "--path", str(tmp_path / "b.toml")])
    assert r.exit_code == 0, r.output
    assert load_config(tmp_path / "b.toml").tasks.heldout_prompts == target
    assert f"held-out set: {target} prompts" in " ".join(r.stdout.split())
