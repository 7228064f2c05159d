"""score_items on a mixed campaign: records prompts judged by their source's own verifier, named and versioned."""

import json

import pytest

from ratchet.loop.config import TaskSourceConfig
from ratchet.loop.evaluation.scoring import reward_spec, reward_version, score_items, verifier_versions
from ratchet.verifiers.reward import VERSION

CHECKS = "__version__ = '2'\ndef verify(completion, record):\n    return completion.strip() == str(record['reference'])\n"


def sources(tmp_path):
    (tmp_path / "own_checks.py").write_text(CHECKS)
    own = TaskSourceConfig(path="own.jsonl", verifier="own_checks:verify", plugin_dir=str(tmp_path))
    return [TaskSourceConfig(path="math.jsonl").model_dump(), own.model_dump()]


def test_mixed_prompts_get_their_own_verifier_and_one_campaign_version(tmp_path):
    spec = reward_spec({}, sources(tmp_path))
    rec = json.dumps({"prompt": "Say 7.", "reference": 7})
    prompts = [
        {"source": "math", "task_format": "math", "answer": "4"},
        {"source": "own", "task_format": "records", "answer": "7", "record_json": rec},
        {"source": "own", "task_format": "records", "answer": "7", "record_json": rec},
    ]
    out = score_items(["Answer: 4", "7", "8"], prompts, spec)
    assert [(k, v.correct) for k, v in out] == [
        ("math", True),
        ("plugin:own_checks:verify", True),
        ("plugin:own_checks:verify", False),
    ]
    version = reward_version(spec)
    assert version.startswith(VERSION + "+plugins[plugin:own_checks:verify=2+") and {v.verifier_version for _, v in out} == {
        version
    }
    assert verifier_versions(spec)["plugin:own_checks:verify"].startswith("2+")
    assert reward_version(reward_spec({}, sources(tmp_path)[:1])) == VERSION  # no plugin: the composite's, as before


def test_a_records_prompt_of_a_source_without_a_verifier_is_refused(tmp_path):
    spec = reward_spec({}, sources(tmp_path))
    with pytest.raises(ValueError, match="source 'elsewhere', which names no verifier"):
        score_items(["7"], [{"source": "elsewhere", "task_format": "records", "answer": "", "record_json": "{}"}], spec)
