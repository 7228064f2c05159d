"""``[verifier]`` takes the reward's defaults from ``RewardSpec``: one source, so the campaign and the library agree."""

import inspect
from dataclasses import fields

from ratchet.loop.config import VerifierConfig
from ratchet.loop.evaluation.scoring import reward_spec
from ratchet.verifiers.reward import DEFAULT_REWARD, RewardSpec, as_trl_reward


def test_verifier_defaults_are_the_reward_specs() -> None:
    """Every ``[verifier]`` field that is a ``RewardSpec`` setting defaults to the spec's value, except the format
    rule (a campaign's prompts ask for an answer line) and the sandbox's mode (None in the spec: the environment's)."""
    own = {"format_template", "code_isolation", "lean_url"}
    shared = {f.name for f in fields(RewardSpec)} & set(VerifierConfig.model_fields) - own
    assert {"format_weight", "timeout_s", "language_weight", "target_language", "answer_format"} <= shared
    cfg = VerifierConfig()
    assert {k: getattr(cfg, k) for k in shared} == {k: getattr(DEFAULT_REWARD, k) for k in shared}
    assert reward_spec(cfg.model_dump()).format_weight == DEFAULT_REWARD.format_weight


def test_trl_reward_defaults_are_the_reward_specs() -> None:
    params = inspect.signature(as_trl_reward).parameters
    for name in ("format_template", "format_weight", "timeout_s", "language_weight", "target_language"):
        assert params[name].default == getattr(DEFAULT_REWARD, name), name
