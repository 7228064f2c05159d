"""Campaign identity is declared per field (ratchet.loop.config.frozen.identity), and campaign_settings follows it."""

import pytest
from pydantic import BaseModel

from ratchet.loop.config import IDENTITIES, RatchetConfig, field_identity, identity, load_config


def _leaves(model: type[BaseModel], inherited: str, prefix: str = ""):
    for name, info in model.model_fields.items():
        kind = field_identity(info, inherited)
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            yield from _leaves(type(default), kind, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", kind


def test_every_field_is_classified() -> None:
    """Each top-level field and section declares its identity; every leaf resolves to a known one."""
    undeclared = [n for n, info in RatchetConfig.model_fields.items() if field_identity(info, None) is None]
    assert not undeclared, f"declare json_schema_extra=identity(...) on: {undeclared}"
    leaves = dict(_leaves(RatchetConfig, "campaign"))
    assert leaves and set(leaves.values()) <= set(IDENTITIES)
    assert {leaves["db"], leaves["compute.devices"], leaves["schedule.cron"], leaves["generation.max_model_len"]} == {"run"}
    assert leaves["verifier.language_weight"] == "neutral_default" and leaves["grpo.lr"] == "campaign"


def test_run_fields_never_change_the_identity() -> None:
    base = load_config(None).campaign_settings()
    for key, value in {
        "db": "other.duckdb",
        "compute.devices": ["cpu", "cpu"],
        "schedule.interval_s": 60,
        "retention.keep_last_promoted": 5,
    }.items():
        assert load_config(None, **{key: value}).campaign_settings() == base, key


def test_neutral_default_fields_count_only_when_set() -> None:
    assert "teacher" not in load_config(None).campaign_settings()["generation"]
    assert load_config(None, **{"generation.teacher": "ckpt"}).campaign_settings()["generation"]["teacher"] == "ckpt"


def test_campaign_fields_change_the_identity() -> None:
    assert load_config(None, **{"sft.lr": 1e-4}).campaign_settings() != load_config(None).campaign_settings()


def test_unknown_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="one of campaign, run, neutral_default"):
        identity("sometimes")
