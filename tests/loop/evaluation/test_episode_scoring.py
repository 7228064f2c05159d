"""An environment's ``score`` judges its source's episodes in ``score_items``, and its identity is part of the
campaign's verifier version: an edited environment file is a new version (so the gate re-verifies before comparing)."""

from __future__ import annotations

import json
import time

from ratchet.loop.config.tasks import TaskSourceConfig
from ratchet.loop.evaluation.episode_scoring import stored_episode
from ratchet.loop.evaluation.scoring import reward_spec, reward_version, score_items
from ratchet.verifiers.reward import VERSION

ENV = """
version = "{v}"


class Judge:
    def reset(self, record):
        return None

    def step(self, messages):
        return None

    def score(self, messages, record):
        return [m["content"] for m in messages if m["role"] == "assistant"] == ["Answer: " + record["answer"]] * 2
"""


def _spec(tmp_path, with_score=True):
    (tmp_path / "judge_env.py").write_text(ENV.format(v="1") if with_score else ENV.split("    def score")[0])
    (tmp_path / "t.jsonl").write_text(json.dumps({"question": "1+6?", "answer": "7"}) + "\n")
    src = TaskSourceConfig(path=str(tmp_path / "t.jsonl"), format="math", environment="judge_env:Judge", max_turns=2)
    return reward_spec({}, [src.model_dump()]), src.source_name()


def test_episodes_of_a_scoring_environment_are_judged_by_it_the_rest_by_the_verifier(tmp_path):
    spec, name = _spec(tmp_path)
    opening = [{"role": "user", "content": "1+6?"}]
    turns = [{"role": "assistant", "content": "Answer: 7"}, {"role": "user", "content": "Sure?"}]
    row = {
        "prompt_messages": json.dumps(opening),
        "messages": json.dumps([*turns, {"role": "assistant", "content": "Answer: 7"}]),
    }
    flip = {**row, "messages": json.dumps([*turns, {"role": "assistant", "content": "Answer: 8"}])}
    prompt = {"source": name, "answer": "7", "task_format": "math", "question": "1+6?"}
    episodes = [stored_episode(row), stored_episode(flip), None]
    assert episodes[2] is None and len(episodes[0]) == 4
    got = score_items(["Answer: 7", "Answer: 8", "Answer: 7"], [prompt] * 3, spec, episodes)
    (k0, v0), (k1, v1), (k2, v2) = got
    assert k0 == k1 == "plugin:judge_env:Judge" and (v0.correct, v1.correct) == (True, False)  # both turns judged
    assert k2 == "math" and v2.correct  # a single-turn row of the source: its verifier
    assert {v.verifier_version for v in (v0, v1, v2)} == {reward_version(spec)}


def test_the_environment_is_part_of_the_version_and_an_edit_changes_it(tmp_path):
    spec, _ = _spec(tmp_path)
    before = reward_version(spec)
    assert before.startswith(VERSION + "+plugins[plugin:judge_env:Judge=1+")
    time.sleep(0.01)
    (tmp_path / "judge_env.py").write_text(ENV.format(v="1") + "\n# edited\n")
    assert reward_version(spec) != before
    plain, _ = _spec(tmp_path, with_score=False)
    assert reward_version(plain) == VERSION  # an environment without score() judges nothing: no identity
