"""Multi-turn environments: the protocol, loading one by name, the episode runner and the built-in python tool."""

from ratchet.loop.environments.episodes import EpisodeSpec, env_segment, run_episodes, sample_mixed, turn_seed
from ratchet.loop.environments.protocol import (
    MAX_MESSAGE_CHARS,
    Environment,
    EnvironmentMessageError,
    EnvironmentRef,
    check_message,
    has_score,
    load_environment,
)
from ratchet.loop.evaluation.episode_scoring import (
    ENVIRONMENT_ERROR,
    episode_verdicts,
    failed_episode_verdicts,
    prompt_record,
)

__all__ = [
    "ENVIRONMENT_ERROR",
    "MAX_MESSAGE_CHARS",
    "Environment",
    "EnvironmentMessageError",
    "EnvironmentRef",
    "EpisodeSpec",
    "check_message",
    "episode_verdicts",
    "failed_episode_verdicts",
    "has_score",
    "env_segment",
    "load_environment",
    "prompt_record",
    "run_episodes",
    "sample_mixed",
    "turn_seed",
]
