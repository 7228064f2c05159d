"""The exported chat of a trajectory: the stored one, else (an old store) rebuilt from the campaign's task set."""

import json

from ratchet.loop.config import load_config
from ratchet.loop.tasks.chat import chats
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.tasks.task_sets import TaskSet


def _config(tmp_path, model):
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 2?", "answer": str(a + 2)}) + "\n" for a in range(40)))
    cfg = tmp_path / "ratchet.toml"
    cfg.write_text(
        f'campaign = "c"\n[model]\nname_or_path = "{model}"\n[tasks]\nheldout_prompts = 2\n'
        f'[[tasks.sources]]\nname = "sums"\npath = "{tasks}"\nformat = "math"\nfewshot = 1\nsystem_prompt = "Own prompt."\n'
    )
    return load_config(cfg)


def test_stored_chat_is_used_and_old_rows_are_rebuilt_per_source_and_counted(tmp_path, smollm2_dir):
    cfg = _config(tmp_path, smollm2_dir)
    stored = [{"role": "system", "content": "exactly what the engine saw"}, {"role": "user", "content": "What is 1 + 2?"}]
    rows = [
        dict(prompt_id="a", source="sums", question="What is 1 + 2?", completion="Answer: 3", prompt_messages=json.dumps(stored)),
        dict(prompt_id="b", source="sums", question="What is 5 + 2?", completion="Answer: 7", prompt_messages=None),
    ]
    got = chats(cfg.model_dump_json(), rows)
    assert got.rerendered == 1
    assert got.messages[0] == [*stored, {"role": "assistant", "content": "Answer: 3"}]
    # the old row: the source's own system prompt and few-shot turn (not the arithmetic demo's), as the round renders it
    want = TaskSet(cfg.tasks).messages(Prompt("b", "sums", "", "What is 5 + 2?", "", "train"))
    assert want[0] == {"role": "system", "content": "Own prompt."} and len(want) == 4
    assert got.messages[1] == [*want, {"role": "assistant", "content": "Answer: 7"}]
    assert got.texts[1].startswith("<|im_start|>system\nOwn prompt.") and got.texts[1].endswith(
        "<|im_start|>assistant\nAnswer: 7"
    )
