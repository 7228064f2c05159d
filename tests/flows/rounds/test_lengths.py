"""Length rules in a real campaign on the tiny model: preflight refuses truncating limits; 'auto' moves the cap."""

import json

import pytest

from ratchet.loop.campaign.round_context import load_ctx, save_config
from ratchet.loop.config import ConfigError, RatchetConfig
from ratchet.loop.train.lengths import auto_max_new_tokens
from ratchet.store.db import query
from tests.flows.rounds.test_round import tiny_config  # noqa: F401 - the fixture


def variant(config_path, campaign, **sections):
    """The tiny campaign's config with some sections' keys replaced, saved under another campaign name."""
    data = json.loads(config_path.read_text())
    for section, values in sections.items():
        data[section] = {**data[section], **values}
    return save_config(RatchetConfig.model_validate({**data, "campaign": campaign}))


def test_preflight_refuses_limits_that_would_truncate_training(tiny_config):  # noqa: F811
    from ratchet.flows.rounds.campaign import preflight

    cfg = load_ctx(variant(tiny_config, "tight", sft={"max_seq_len": 24})).cfg
    with pytest.raises(ConfigError, match=r"^sft.max_seq_len \(24\) < longest prompt \(\d+ tokens\) \+ max_new_tokens \(6\)"):
        preflight(cfg)
    assert not load_ctx(tiny_config).db.exists()  # failed before any store was made


def test_auto_max_new_tokens_changes_the_next_rounds_limit(prefect_harness, tiny_config):  # noqa: F811
    from ratchet.flows.compute.resolve import rollout_cap
    from ratchet.flows.rounds.campaign import prepare_campaign, start_round
    from ratchet.flows.rounds.stages.pipeline import generate
    from ratchet.flows.rounds.stages.round_engine import round_engine

    path = variant(tiny_config, "auto", generation={"max_new_tokens": "auto", "max_new_tokens_min": 2, "max_new_tokens_max": 12})
    prepare_campaign.fn(str(path))
    caps = []
    for r in (1, 2):
        incumbent = start_round.fn(str(path), r)
        with round_engine(load_ctx(path, r), incumbent) as engine:
            generate.fn(str(path), r, 0, None, engine)
        caps.append(rollout_cap(load_ctx(path, r)))
    db = load_ctx(path).db
    sql = "SELECT DISTINCT max_new_tokens FROM trajectories WHERE purpose = 'rollout' AND round_id LIKE '%-r{}'"
    assert query(db, sql.format(1))[1] == [(2,)]  # round 1: the minimum
    p90 = query(
        db, "SELECT quantile_cont(completion_tokens, 0.9) FROM trajectories WHERE purpose = 'rollout' AND round_id LIKE '%-r1'"
    )[1][0][0]
    assert caps[1] == auto_max_new_tokens(p90, 2, 12) != 2  # the tiny model's answers do not fit 2 tokens
    assert query(db, sql.format(2))[1] == [(caps[1],)]
    assert load_ctx(path, 2).eval_set_id() == load_ctx(path, 1).eval_set_id()  # evaluation keeps the fixed maximum


def test_preflight_refuses_a_campaign_whose_checkpoint_changed(prefect_harness, tiny_config, tmp_path):  # noqa: F811
    """A continued campaign whose recorded checkpoint's files were edited (or corrupted) is refused at preflight, in one
    line naming the checkpoint, before any round starts; an untouched one passes."""
    import shutil

    from ratchet.flows.rounds.campaign import preflight, prepare_campaign
    from ratchet.loop.checkpoints import ModelError
    from ratchet.store.db import transaction

    path = variant(tiny_config, "edited")
    prepare_campaign.fn(str(path))
    ctx = load_ctx(path)
    base_id, base_dir = query(ctx.db, "SELECT checkpoint_id, path FROM checkpoints")[1][0]
    copy = tmp_path / "base-copy"
    shutil.copytree(base_dir, copy)
    with transaction(ctx.db) as con:
        con.execute("UPDATE checkpoints SET path = ? WHERE checkpoint_id = ?", [str(copy), base_id])
    preflight(ctx.cfg)  # same files: fine
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("{", '{"edited": 1, ', 1))
    before = query(ctx.db, "SELECT count(*) FROM checkpoints")[1]
    with pytest.raises(ModelError, match=rf"checkpoint {base_id} at .* was changed after it was recorded"):
        preflight(ctx.cfg)
    assert query(ctx.db, "SELECT count(*) FROM checkpoints")[1] == before  # nothing recorded
