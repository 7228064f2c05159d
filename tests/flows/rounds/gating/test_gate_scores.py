import pytest

from ratchet.flows.rounds.gating.gate_inputs import Grouping, scores, stored_gate_config

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


def test_gate_plan_command_prints_rates_and_refuses_bad_input():
    import json

    from typer.testing import CliRunner

    from ratchet.flows.cli import app

    r = CliRunner().invoke(app, ["gate", "plan", "--eval-prompts", "48", "--trials", "100", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert set(got["promote_rate"]) >= {"-0.100", "-0.050", "+0.000", "+0.050", "+0.100"}
    assert got["promote_rate"]["-0.050"] <= 0.1 and got["discordance"] == 0.2 and got["needed_prompts"] > 48
    bad = CliRunner().invoke(app, ["gate", "plan", "--eval-prompts", "48", "--discordance", "1.5"])
    assert bad.exit_code == 2 and "--discordance" in bad.output


def test_preflight_warning_quotes_the_simulated_rates():
    from ratchet.flows.rounds.campaign import gate_warning
    from ratchet.loop.config import RatchetConfig

    msg = gate_warning(RatchetConfig(), 48, "heldout")
    assert "'heldout'" in msg and "48 prompts" in msg and "5 points better" in msg and "\n" not in msg
    assert gate_warning(RatchetConfig(), 400) is None
