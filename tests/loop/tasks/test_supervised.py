"""General SFT data (sft.general_data / general_ratio) and reference-solution examples."""

import json

import pytest

from ratchet.loop.config import ConfigError, RatchetConfig
from ratchet.loop.tasks.demo import data_path
from ratchet.loop.tasks.sources import ArithmeticTasks, make_prompt
from ratchet.loop.tasks.supervised import (
    draw_general,
    general_count,
    general_examples,
    load_general_data,
    reference_examples,
    training_example_rows,
)


def write(tmp_path, *lines: str):
    p = tmp_path / "general.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_chat_and_prompt_completion_records_load():
    recs = load_general_data(data_path("general_sft.jsonl"))  # the sample the r1 recipe points at
    assert len(recs) == 16 and len({r.example_id for r in recs}) == 16
    chat, pc = recs[0], recs[1]
    assert chat.messages[0] == ("system", "You are a helpful assistant.") and chat.messages[-1][0] == "user"
    assert pc.messages == (("user", "Write one sentence about the sea."),) and pc.completion.startswith("The sea")


@pytest.mark.parametrize(
    "line, msg",
    [
        ("not json", r"general.jsonl:2: not JSON"),
        (
            '{"messages": [{"role": "user", "content": "hi"}]}',
            r"general.jsonl:2: \"messages\" must end with a non-empty assistant",
        ),
        ('{"prompt": "q"}', r"general.jsonl:2: a record needs \"messages\""),
        ('{"prompt": "q", "completion": ""}', r"general.jsonl:2: \"completion\" must be a non-empty string"),
        ('{"prompt": [{"role": 1}], "completion": "a"}', r"general.jsonl:2: a prompt must be"),
        ("[1, 2]", r"general.jsonl:2: a record must be a JSON object"),
    ],
)
def test_a_bad_record_names_the_file_and_line(tmp_path, line, msg):
    p = write(tmp_path, json.dumps({"prompt": "q", "completion": "a"}), line)
    with pytest.raises(ConfigError, match=msg) as e:
        load_general_data(p)
    assert "\n" not in str(e.value)


def test_missing_or_empty_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_general_data(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="holds no records"):
        load_general_data(write(tmp_path, ""))


def test_ratio_gives_the_share_of_the_training_set():
    assert general_count(30, 0.25) == 10  # 10 / (30 + 10) = 0.25
    assert general_count(0, 0.5) == 0 and general_count(10, 0.0) == 0
    recs = load_general_data(data_path("general_sft.jsonl"))
    a, b = draw_general(recs, 5, seed=3), draw_general(recs, 5, seed=3)
    assert a == b and len(set(a)) == 5 and draw_general(recs, 5, seed=4) != a  # deterministic in the seed
    assert len(draw_general(recs, 99, seed=0)) == 16  # capped at the file


def test_ratio_and_data_go_together():
    with pytest.raises(ValueError, match="go together"):
        RatchetConfig.model_validate({"sft": {"general_ratio": 0.2}})
    with pytest.raises(ValueError, match="less than 1"):
        RatchetConfig.model_validate({"sft": {"general_data": "g.jsonl", "general_ratio": 1.0}})


def test_examples_name_their_origin():
    prompts = ArithmeticTasks(("sum_small", "linear_equation")).draw(6, "train", seed=0)
    rows, missing = reference_examples([*prompts, make_prompt("f", "t", "q?", "1", 0.2)])
    assert len(rows) == 6 and [p.question for p in missing] == ["q?"]
    for r, p in zip(rows, prompts):
        assert (
            r["origin"] == "reference" and r["trajectory_id"] == p.prompt_id and r["completion"].endswith(f"Answer: {p.answer}")
        )
    general = general_examples(load_general_data(data_path("general_sft.jsonl"))[:2])
    assert [g["origin"] for g in general] == ["general", "general"]
    assert json.loads(general[0]["messages_json"])[-1] == {"role": "user", "content": "What is the capital of France?"}
    got = training_example_rows("run", [rows[0]["trajectory_id"], general[1]["trajectory_id"], "traj-x"], rows + general)
    assert [g["origin"] for g in got] == ["reference", "general", "rollout"]


def test_fit_error_names_the_longest_example_and_the_limit(smollm2_dir):
    from transformers import AutoTokenizer

    from ratchet.loop.tasks.supervised import fit_error

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    recs = load_general_data(data_path("general_sft.jsonl"))
    examples = [([{"role": r, "content": c} for r, c in g.messages], g.completion) for g in recs]
    assert fit_error(tok, examples, 256, "general_data record") is None
    msg = fit_error(tok, examples, 16, "general_data record")
    need = int(msg.rsplit(">= ", 1)[1])
    assert msg.startswith("sft.max_seq_len (16) < the longest general_data record with its prompt (") and need > 16
    assert fit_error(tok, examples, need, "x") is None and fit_error(tok, examples, need - 1, "x") is not None
