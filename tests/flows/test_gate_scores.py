import pytest

from ratchet.flows.rounds.gate_inputs import Grouping, scores, stored_gate_config

ROWS = [dict(greedy_correct=True, n=4, c=1), dict(greedy_correct=False, n=4, c=3)]


def test_gate_scores_greedy_or_sample_means():
    assert scores(ROWS, 0) == [1.0, 0.0]
    assert scores(ROWS, 4) == [0.25, 0.75]
    with pytest.raises(ValueError, match="eval.num_samples >= 8"):
        scores(ROWS, 8)


def test_grouping_by_evals_entry_else_source_from_stored_settings():
    evals = {"evals": [{"name": "math", "source": "math", "prompts": 24}, {"name": "canary", "file": {}, "role": "guard"}]}
    g = Grouping.of(evals)
    assert g.roles == {"math": "gate", "canary": "guard"} and g.key("math", "m") == "math"
    two = Grouping.of({"tasks": {"sources": [{"name": "a"}, {"name": "b"}]}})
    assert two.by_source and two.key("heldout", "b") == "b"
    assert Grouping.of({"tasks": {}}).key("heldout", "arithmetic") == "heldout"


def test_decisions_before_settings_were_recorded_replay_the_old_rule():
    row = {
        "settings_json": None,
        "tolerance": 0.03,
        "test": "mcnemar",
        "config_json": '{"gate": {"tolerance": 0.03, "alpha": 0.1}}',
    }
    g = stored_gate_config(row)
    assert (g.rule, g.margin, g.test, g.alpha) == ("no_detected_drop", 0.03, "mcnemar", 0.1)
