"""The records format: a string or chat prompt, the whole record kept, malformed prompts refused by record."""

import json

import pytest

from ratchet.loop.config import ConfigError, TaskSourceConfig, load_config
from ratchet.loop.tasks.sources import FileTasks, TaskDataError
from ratchet.loop.tasks.task_sets import TaskSet

CHECKS = "def verify(completion, record):\n    return completion.strip() == record['reference']\n"


def write(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records))
    return path


def test_string_and_chat_prompts_keep_the_whole_record(tmp_path):
    f = write(
        tmp_path / "t.jsonl",
        [
            {"prompt": "Say 7.", "reference": 7, "meta": {"k": [1, 2]}},
            {"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                        {"role": "user", "content": "Say 8."}], "reference": "8"},
            {"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Say 9."}]},
        ],
    )  # fmt: skip
    src = FileTasks(TaskSourceConfig(path=str(f), verifier="m:f"), "own")
    assert src.format == "records"
    a, b, c = src.prompts
    assert (a.question, a.answer, a.task_format) == ("Say 7.", "7", "records")
    assert json.loads(a.record_json) == {"prompt": "Say 7.", "reference": 7, "meta": {"k": [1, 2]}}
    assert (b.question, b.answer, c.answer) == ("Say 8.", "8", "")
    ts = TaskSet(load_config(None, **{"tasks.sources": [{"path": str(f), "verifier": "math", "system_prompt": "Sys."}]}).tasks)
    assert ts.messages(a) == [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Say 7."}]
    assert [m["role"] for m in ts.messages(b)] == ["system", "user", "assistant", "user"]
    assert ts.messages(c) == json.loads(c.record_json)["prompt"]  # its own system message: none prepended


def test_the_record_is_part_of_the_prompt_id(tmp_path):
    f = write(tmp_path / "t.jsonl", [{"prompt": "Q", "reference": "1", "x": 1}, {"prompt": "Q", "reference": "1", "x": 2}])
    ps = FileTasks(TaskSourceConfig(path=str(f), verifier="m:f"), "own").prompts
    assert len({p.prompt_id for p in ps}) == 2 and len({p.split for p in ps}) == 1  # one question: one side


@pytest.mark.parametrize(
    ("rec", "msg"),
    [
        ({"question": "Q"}, '"prompt" is missing'),
        ({"prompt": 5}, '"prompt" is of type int'),
        ({"prompt": []}, '"prompt" is an empty list'),
        ({"prompt": [{"role": "user"}]}, '"prompt"\\[0\\] is not a'),
        ({"prompt": [{"role": "wizard", "content": "x"}]}, '"prompt"\\[0\\] is not a'),
        ({"prompt": [{"role": "system", "content": "x"}]}, '"prompt" has no non-empty user message'),
    ],
)
def test_malformed_prompts_are_refused_naming_the_record(tmp_path, rec, msg):
    f = write(tmp_path / "t.jsonl", [{"prompt": "fine", "reference": "1"}, rec])
    with pytest.raises(TaskDataError, match=f"t.jsonl:2: {msg}"):
        FileTasks(TaskSourceConfig(path=str(f), format="records", verifier="m:f"), "own")


def test_config_load_imports_the_verifier_from_the_config_folder(tmp_path):
    write(tmp_path / "t.jsonl", [{"prompt": "Say 7.", "reference": "7"}])
    (tmp_path / "own_checks.py").write_text(CHECKS)
    (tmp_path / "r.toml").write_text('[[tasks.sources]]\npath = "t.jsonl"\nverifier = "own_checks:verify"\n')
    cfg = load_config(tmp_path / "r.toml")
    assert cfg.tasks.sources[0].plugin_dir == str(tmp_path.resolve())
    (tmp_path / "r.toml").write_text('[[tasks.sources]]\npath = "t.jsonl"\nverifier = "own_checks:verfy"\n')
    with pytest.raises(ConfigError, match=r"tasks.sources\['t'\].verifier: plugin 'own_checks:verfy'.*has no 'verfy'"):
        load_config(tmp_path / "r.toml")


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_a_record_nested_too_deep_is_one_line_naming_it(tmp_path, depth):
    f = tmp_path / "t.jsonl"
    f.write_text('{"prompt": "fine"}\n{"prompt": "hi", "x": ' + "[" * depth + "]" * depth + "}\n")
    with pytest.raises(TaskDataError, match=r"t.jsonl:2: JSON nested too deeply"):
        FileTasks(TaskSourceConfig(path=str(f), format="records", verifier="m:f"), "own")
